/**
 * Vigil on arm64 (NVIDIA Grace nodes), proven under emulation on this amd64 machine: the image
 * built for linux/arm64 with podman from the same Dockerfile (test/deploy/build-image.sh arm64: the
 * build stage runs natively and cross-compiles re2; only the final stage's apt-get runs under qemu),
 * then run from its exported filesystem under chroot, every arm64 program going through
 * qemu-aarch64 registered in binfmt_misc (test/deploy/binfmt.sh), which the test puts back as it
 * found it. The figures under emulation are not performance figures.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { closeSync, existsSync, mkdirSync, mkdtempSync, openSync, readSync, rmSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { uniquePci, writeKmsg } from '../helpers/agent-process.ts';
import { entryLines, loadCorpus } from '../helpers/corpus.ts';
import { publish } from './pod-install.ts';
import { HELM, versionsVar } from './tools.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const binfmt = path.join(root, 'test/deploy/binfmt.sh');
const missing = ['podman', 'debootstrap', 'qemu-aarch64-static', 'aarch64-linux-gnu-gcc'].filter(
  (b) => spawnSync('sh', ['-c', `command -v ${b}`]).status !== 0,
);
const skip =
  process.getuid?.() !== 0
    ? 'needs root (binfmt_misc, chroot, /dev/kmsg)'
    : missing.length
      ? `${missing.join(', ')} not installed (.ci/run installs podman, debootstrap, qemu-user-static, gcc-aarch64-linux-gnu)`
      : false;

/** ELF e_machine of a file: 0xB7 is AArch64, 0x3E x86-64. */
function elfMachine(file: string): number {
  const fd = openSync(file, 'r');
  try {
    const b = Buffer.alloc(20);
    readSync(fd, b, 0, 20, 0);
    assert.equal(b.subarray(0, 4).toString('latin1'), '\x7fELF', `${file} is not an ELF file`);
    return b.readUInt16LE(18);
  } finally {
    closeSync(fd);
  }
}

const AARCH64 = 0xb7;

test(
  'arm64: the image built for linux/arm64 scans the whole corpus as amd64 does and runs the agent on the real /dev/kmsg',
  { skip, timeout: 60 * 60_000 },
  async (t) => {
    const before = spawnSync('bash', [binfmt, 'state'], { encoding: 'utf8' }).stdout;
    const work = mkdtempSync(path.join(os.tmpdir(), 'vigil-arm64-'));
    const stateFile = path.join(work, 'binfmt.state');
    const mounts: string[] = [];
    t.after(() => {
      for (const m of mounts.reverse()) spawnSync('umount', ['-l', m]);
      spawnSync('bash', [binfmt, 'restore', stateFile]);
      rmSync(work, { recursive: true, force: true });
    });
    const en = spawnSync('bash', [binfmt, 'enable', stateFile], { encoding: 'utf8' });
    assert.equal(en.status, 0, en.stderr);

    const r = spawnSync('bash', [path.join(root, 'test/deploy/build-image.sh'), path.join(work, 'out'), 'arm64'], {
      encoding: 'utf8',
      maxBuffer: 64 << 20,
    });
    assert.equal(r.status, 0, `build-image.sh arm64 failed:\n${r.stderr.slice(-6000)}`);
    const built = JSON.parse(r.stdout) as {
      image: string;
      arch: string;
      rootfs: string;
      entrypoint: string[];
      sizeBytes: number;
      baseSeconds: number;
      buildSeconds: number;
    };
    const rootfs = built.rootfs;
    t.diagnostic(
      `image ${built.image} (${built.arch}): ${(built.sizeBytes / 1e6).toFixed(1)} MB; base ${built.baseSeconds} s, podman build ${built.buildSeconds} s (under emulation: not a performance figure)`,
    );

    await t.test('its Node, koffi and re2 are arm64 code, and re2 loads', () => {
      assert.equal(built.arch, 'arm64');
      assert.equal(elfMachine(path.join(rootfs, 'usr/local/bin/node')), AARCH64);
      assert.equal(elfMachine(path.join(rootfs, 'app/node_modules/re2/build/Release/re2.node')), AARCH64);
      assert.ok(existsSync(path.join(rootfs, 'app/node_modules/@koromix/koffi-linux-arm64')), 'koffi-linux-arm64');
      assert.ok(!existsSync(path.join(rootfs, 'app/node_modules/@koromix/koffi-linux-x64')), 'no x64 koffi in an arm64 image');
      const re2 = spawnSync(
        'chroot',
        [
          rootfs,
          '/usr/local/bin/node',
          '-e',
          'const RE2 = require("/app/node_modules/re2"); process.stdout.write(process.arch + " " + new RE2("a(b+)", "u").exec("xabb")[1])',
        ],
        { encoding: 'utf8', timeout: 120_000 },
      );
      assert.equal(re2.status, 0, re2.stderr);
      assert.equal(re2.stdout, 'arm64 bb');
    });

    const env = { PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin', NODE_ENV: 'production' };
    const inImage = (args: string[]) => [rootfs, ...built.entrypoint, ...args];

    await t.test('`vigil scan --json` of the whole corpus gives, line by line, what amd64 gives', () => {
      const lines = loadCorpus().flatMap((e) => entryLines(e));
      mkdirSync(path.join(rootfs, 'tmp'), { recursive: true });
      writeFileSync(path.join(rootfs, 'tmp/corpus.log'), `${lines.join('\n')}\n`);
      const arm = spawnSync('chroot', inImage(['scan', '--json', '/tmp/corpus.log']), {
        encoding: 'utf8',
        env,
        timeout: 600_000,
        maxBuffer: 64 << 20,
      });
      assert.equal(arm.status, 0, arm.stderr);
      // amd64: the same tree on this machine, on the image's Node (24) for x64.
      const node24 = spawnSync('bash', [path.join(root, 'scripts/fetch-node.sh')], { encoding: 'utf8' }).stdout.trim();
      const amd = spawnSync(
        path.join(node24, 'bin/node'),
        [path.join(root, 'bin/vigil.js'), 'scan', '--json', path.join(rootfs, 'tmp/corpus.log')],
        {
          encoding: 'utf8',
          timeout: 600_000,
          maxBuffer: 64 << 20,
        },
      );
      assert.equal(amd.status, 0, amd.stderr);
      const armRows = arm.stdout.trim().split('\n');
      const amdRows = amd.stdout.trim().split('\n');
      assert.ok(amdRows.length > 200, `only ${amdRows.length} findings on amd64 from ${lines.length} lines`);
      for (let i = 0; i < Math.max(armRows.length, amdRows.length); i++) assert.equal(armRows[i], amdRows[i], `finding ${i + 1}`);
      // The summary (lines read, formats, findings) too.
      const summary = (s: string) => s.split('\n').find((l) => l.startsWith('{"summary"'));
      assert.equal(summary(arm.stderr), summary(amd.stderr));
      t.diagnostic(`${lines.length} corpus lines, ${armRows.length} findings, equal on arm64 and amd64`);
    });

    // The real /dev/kmsg and the kernel filesystems, as a container runtime gives them.
    mkdirSync(path.join(rootfs, 'dev'), { recursive: true });
    for (const [name, minor] of [
      ['null', 3],
      ['zero', 5],
      ['urandom', 9],
      ['kmsg', 11],
    ] as const) {
      const dev = path.join(rootfs, 'dev', name);
      rmSync(dev, { force: true });
      assert.equal(spawnSync('mknod', ['-m', '0666', dev, 'c', '1', String(minor)]).status, 0, `mknod ${dev}`);
    }
    for (const [fs, dir] of [
      ['proc', 'proc'],
      ['sysfs', 'sys'],
    ] as const) {
      const target = path.join(rootfs, dir);
      mkdirSync(target, { recursive: true });
      assert.equal(spawnSync('mount', ['-t', fs, fs, target]).status, 0, `mount ${fs}`);
      mounts.push(target);
    }

    await t.test('`vigil run --standalone` reads the real /dev/kmsg under emulation and reports an Xid 79 on /conditions', async () => {
      const child = spawn('chroot', inImage(['run', '--standalone', '--listen', '127.0.0.1:0', '--state-dir', '/var/lib/vigil']), {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      t.after(async () => {
        if (child.exitCode === null) child.kill('SIGKILL');
        await exited;
      });
      let stderr = '';
      let out = '';
      child.stderr.on('data', (d) => (stderr += d));
      child.stdout.on('data', (d) => (out += d));
      const started = async (): Promise<number> => {
        for (
          const deadline = Date.now() + 180_000;
          Date.now() < deadline && child.exitCode === null;
          await new Promise((res) => setTimeout(res, 200))
        ) {
          for (const line of out.split('\n')) {
            try {
              const l = JSON.parse(line) as { event?: string; listen?: string };
              if (l.event === 'started') return Number(String(l.listen).split(':').pop());
            } catch {
              // not a log line
            }
          }
        }
        throw new Error(`agent did not start; exit ${child.exitCode}; stderr: ${stderr.slice(-2000)}`);
      };
      const port = await started();
      const pci = uniquePci();
      writeKmsg(`NVRM: Xid (PCI:${pci}): 79, pid=0, name=arm64-test, GPU has fallen off the bus.`);
      type Conditions = { conditions: { type: string; status: string; reason: string; active: { reason: string; entity: string }[] }[] };
      let seen: Conditions['conditions'][number] | undefined;
      for (const deadline = Date.now() + 60_000; !seen && Date.now() < deadline; await new Promise((res) => setTimeout(res, 200))) {
        const c = (await (await fetch(`http://127.0.0.1:${port}/conditions`)).json()) as Conditions;
        seen = c.conditions.find((x) => x.active.some((a) => a.entity === `gpu:${pci}`));
      }
      assert.ok(seen, `no condition names gpu:${pci}; stderr: ${stderr.slice(-2000)}`);
      assert.equal(seen.type, 'AcceleratedHardwareReady');
      assert.equal(seen.status, 'False');
      assert.ok(seen.active.some((a) => a.reason === 'NvidiaXID79Error' && a.entity === `gpu:${pci}`));
      child.kill('SIGTERM');
      assert.equal(await exited, 0, stderr);
    });

    const crane = versionsVar('CRANE_BIN');
    await t.test(
      'the local registry holds one manifest list naming the amd64 and arm64 images, and the chart names that one tag',
      { skip: existsSync(crane) && existsSync(HELM) ? false : 'crane or helm not built (test/cluster/build-node.sh, build.sh)' },
      async () => {
        const port = 20000 + Math.floor(Math.random() * 20000);
        // crane keeps blobs under --disk, which must exist (every upload gets a 500 otherwise).
        mkdirSync(path.join(work, 'registry'), { recursive: true });
        const registry = spawn(crane, ['registry', 'serve', '--address', `127.0.0.1:${port}`, '--disk', path.join(work, 'registry')], {
          stdio: 'ignore',
        });
        try {
          for (let i = 0; i < 100; i++) {
            if (
              await fetch(`http://127.0.0.1:${port}/v2/`).then(
                (r) => r.ok,
                () => false,
              )
            )
              break;
            await new Promise((res) => setTimeout(res, 100));
          }
          const reg = `127.0.0.1:${port}`;
          const pub = publish(reg, ['amd64', 'arm64']);
          assert.equal(pub.arches, 'amd64 arm64');
          const m = spawnSync(crane, ['manifest', pub.image], { encoding: 'utf8' });
          assert.equal(m.status, 0, m.stderr);
          const index = JSON.parse(m.stdout) as { mediaType?: string; manifests?: { platform?: { os: string; architecture: string } }[] };
          assert.match(String(index.mediaType), /manifest\.list|image\.index/);
          assert.deepEqual(index.manifests?.map((x) => `${x.platform?.os}/${x.platform?.architecture}`).sort(), [
            'linux/amd64',
            'linux/arm64',
          ]);
          // Each entry is the image built for that architecture.
          const cfg = (arch: string) =>
            JSON.parse(spawnSync(crane, ['config', '--platform', `linux/${arch}`, pub.image], { encoding: 'utf8' }).stdout) as {
              architecture: string;
            };
          assert.equal(cfg('arm64').architecture, 'arm64');
          assert.equal(cfg('amd64').architecture, 'amd64');
          // The chart from the same registry: one image reference, nothing chosen per architecture.
          const h = spawnSync(HELM, ['template', 'vigil', pub.chart, '--version', pub.chartVersion, '--plain-http'], {
            encoding: 'utf8',
            env: {
              ...process.env,
              HELM_CONFIG_HOME: path.join(work, 'helm'),
              HELM_CACHE_HOME: path.join(work, 'helm'),
              HELM_DATA_HOME: path.join(work, 'helm'),
            },
          });
          assert.equal(h.status, 0, h.stderr);
          assert.match(h.stdout, /image: "?\S+\/vigil:/);
          assert.doesNotMatch(h.stdout, /amd64|arm64|kubernetes\.io\/arch/);
        } finally {
          registry.kill('SIGKILL');
        }
      },
    );

    await t.test('binfmt_misc is as it was before the test once it is restored', () => {
      for (const m of mounts.splice(0).reverse()) spawnSync('umount', ['-l', m]);
      assert.equal(spawnSync('bash', [binfmt, 'restore', stateFile]).status, 0);
      assert.equal(spawnSync('bash', [binfmt, 'state'], { encoding: 'utf8' }).stdout, before);
    });
  },
);
