/**
 * Signals on the real `vigil run` process. None that a local root user or tool may send kills the
 * agent with its state unsaved or opens a way in: SIGUSR1 does not open the Node inspector (which
 * would run code as root for anyone on the node's loopback), the signals that ask a process to end
 * stop it cleanly with a log line and its state saved, and the other default-fatal ones are ignored
 * and logged. An inspector asked for through NODE_OPTIONS is refused.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { once } from 'node:events';
import { readFileSync, readdirSync, readlinkSync, rmSync, writeFileSync } from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { kernelLogOnlyConfig, startAgent, uniquePci, writeKmsg, type AgentProcess } from '../helpers/agent-process.ts';
import { tempDir } from '../helpers/temp-dir.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');

function setup(t: { after: (fn: () => void) => void }): { dir: string; args: string[] } {
  const dir = tempDir('vigil-signals-');
  t.after(() => rmSync(dir, { recursive: true, force: true }));
  const config = path.join(dir, 'vigil.yaml');
  // Kernel log only, lookback 0: records already in the ring (other tests' faults) are not this test's business.
  writeFileSync(config, kernelLogOnlyConfig());
  return { dir, args: ['--standalone', '--state-dir', dir, '--config', config] };
}

/** TCP ports the process listens on: its socket fds matched against the kernel's listening sockets. */
function listeningPorts(pid: number): number[] {
  const inodes = new Set<string>();
  for (const fd of readdirSync(`/proc/${pid}/fd`)) {
    try {
      const m = /^socket:\[(\d+)\]$/.exec(readlinkSync(`/proc/${pid}/fd/${fd}`));
      if (m) inodes.add(m[1]);
    } catch {
      /* closed meanwhile */
    }
  }
  const ports: number[] = [];
  for (const table of ['tcp', 'tcp6']) {
    for (const line of readFileSync(`/proc/${pid}/net/${table}`, 'utf8').split('\n').slice(1)) {
      const f = line.trim().split(/\s+/);
      if (f[3] === '0A' && inodes.has(f[9])) ports.push(parseInt(f[1].split(':')[1], 16));
    }
  }
  return ports.sort((a, b) => a - b);
}

function refused(port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const s = net.connect(port, '127.0.0.1');
    s.once('connect', () => {
      s.destroy();
      resolve(false);
    });
    s.once('error', () => resolve(true));
  });
}

async function signalLogged(a: AgentProcess, signal: string): Promise<boolean> {
  return a
    .waitFor((l) => l.event === 'signal' && l.signal === signal, 3000)
    .then(() => true)
    .catch(() => false);
}

test('SIGUSR1 opens no inspector: the agent listens only on its own port, 9229 stays closed, and it runs on', async (t) => {
  const { args } = setup(t);
  const agent = await startAgent(args);
  t.after(() => agent.stop());
  const pid = agent.child.pid!;
  assert.deepEqual(listeningPorts(pid), [agent.port]);

  agent.child.kill('SIGUSR1');
  // Node opens the inspector within milliseconds of the signal; the log line says it was handled.
  const logged = await signalLogged(agent, 'SIGUSR1');
  assert.deepEqual(listeningPorts(pid), [agent.port], 'no new listening socket (the inspector would be on 9229)');
  assert.ok(await refused(9229), 'nothing accepts on 127.0.0.1:9229');
  assert.ok(logged, 'the ignored signal is logged');
  assert.equal(agent.child.exitCode, null, 'still running');
  assert.equal((await agent.fetch('/healthz')).status, 200);
});

test('default-fatal signals that mean nothing to Vigil are ignored and logged: the agent keeps running and serving', async (t) => {
  const { args } = setup(t);
  const agent = await startAgent(args);
  t.after(() => agent.stop());
  for (const signal of ['SIGUSR2', 'SIGALRM', 'SIGVTALRM', 'SIGPROF', 'SIGIO', 'SIGPWR', 'SIGSTKFLT', 'SIGPIPE', 'SIGXFSZ'] as const) {
    agent.child.kill(signal);
    // SIGPIPE and SIGXFSZ Node ignores itself (no log line); the others are logged once handled.
    if (signal !== 'SIGPIPE' && signal !== 'SIGXFSZ') assert.ok(await signalLogged(agent, signal), `${signal} is logged`);
    else await new Promise((r) => setTimeout(r, 200));
    assert.equal(agent.child.exitCode, null, `still running after ${signal}`);
    assert.equal(agent.child.signalCode, null, `not killed by ${signal}`);
  }
  assert.equal((await agent.fetch('/healthz')).status, 200);
  assert.equal(await agent.stop(), 0);
});

for (const signal of ['SIGHUP', 'SIGQUIT', 'SIGXCPU'] as const) {
  test(`${signal} stops the agent cleanly: exit 0, a "stopping" log line, and the finding it just saw saved`, async (t) => {
    const { dir, args } = setup(t);
    const agent = await startAgent(args);
    t.after(() => agent.stop());
    const pci = uniquePci();
    writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=1234, name=python3, GPU has fallen off the bus.`);
    await agent.waitFor((l) => l.event === 'finding' && l.entity === `gpu:${pci}`);
    const exited = once(agent.child, 'exit');
    agent.child.kill(signal);
    const [code, killedBy] = (await exited) as [number | null, NodeJS.Signals | null];

    assert.deepEqual({ code, signal: killedBy }, { code: 0, signal: null }, `a clean exit, not death by ${signal}`);
    assert.ok(
      agent.lines.some((l) => l.event === 'stopping' && l.signal === signal),
      'says why it stops',
    );
    // The signal follows the finding at once: the coalesced save may not have run yet, the stop's save must.
    const state = readFileSync(path.join(dir, 'state.json'), 'utf8');
    assert.ok(state.includes(`gpu:${pci}`), 'the finding is in the saved state');
  });
}

test('an inspector asked for in NODE_OPTIONS is refused: vigil run exits 2 naming it, and serves nothing', async (t) => {
  const { args } = setup(t);
  const child = spawn(process.execPath, [path.join(root, 'bin/vigil.js'), 'run', '--listen', '127.0.0.1:0', ...args], {
    cwd: root,
    env: { ...process.env, NODE_OPTIONS: `${process.env.NODE_OPTIONS ?? ''} --inspect=127.0.0.1:0` },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  t.after(() => child.kill('SIGKILL'));
  let output = '';
  child.stdout.on('data', (d) => (output += d));
  child.stderr.on('data', (d) => (output += d));
  const timer = setTimeout(() => child.kill('SIGKILL'), 30_000);
  const [code] = (await once(child, 'exit')) as [number | null];
  clearTimeout(timer);
  assert.equal(code, 2, output);
  assert.match(output, /refuses to start with the Node inspector open \(an --inspect flag in NODE_OPTIONS/);
  assert.ok(!output.includes('"event":"started"'), output);
});
