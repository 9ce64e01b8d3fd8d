/** system: processes, memory, pressure stall information, uptime and load, kernel parameters. */
import { readFileSmall, scanProcesses } from '../../sources/host/index.ts';
import { commandCollector, filesCollector } from './common.ts';
import type { Collector, CollectorContext } from './types.ts';

/** `ps` without ps: pid, state and command line from /proc. */
async function processesFromProc(ctx: CollectorContext): Promise<string> {
  const procs = await scanProcesses(ctx.capture.hostRoot, ctx.signal);
  const lines = procs.map((p) => {
    const cmd = readFileSmall(ctx.host(`/proc/${p.pid}/cmdline`))
      ?.replace(/\0+$/, '')
      .replace(/\0/g, ' ');
    return `${String(p.pid).padStart(7)} ${p.state} ${cmd || `[${p.comm}]`}`;
  });
  return `    PID S COMMAND\n${lines.join('\n')}\n`;
}

export function systemCollectors(): Collector[] {
  const ps = commandCollector('system/processes', 'system', 'system/processes.txt', [
    ['ps', '-eo', 'pid,ppid,user,ni,stat,pcpu,pmem,rss,vsz,lstart,etime,wchan:32,args', '--sort=-pcpu'],
  ]);
  return [
    {
      ...ps,
      // ps is missing from minimal images; the async /proc walk is the fallback.
      run: async (ctx) => {
        const r = await ps.run(ctx);
        if (r.skipped === undefined) return r;
        return { data: await processesFromProc(ctx), note: `${r.skipped}; read from /proc instead` };
      },
    },
    filesCollector('system/memory', 'system', 'system/memory.txt', ['/proc/meminfo', '/proc/vmstat', '/proc/buddyinfo']),
    filesCollector('system/pressure', 'system', 'system/pressure.txt', [
      '/proc/pressure/cpu',
      '/proc/pressure/memory',
      '/proc/pressure/io',
      '/proc/pressure/irq',
    ]),
    filesCollector('system/uptime', 'system', 'system/uptime.txt', ['/proc/uptime', '/proc/loadavg']),
    commandCollector('system/sysctl', 'system', 'system/sysctl.txt', [['sysctl', '-a']]),
    filesCollector('system/os-release', 'system', 'system/os-release', ['/etc/os-release']),
  ];
}
