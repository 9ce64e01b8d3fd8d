/**
 * The container image, built for real from the Dockerfile with podman (test/deploy/build-image.sh:
 * a local Debian base carrying Node 24 from the npm registry, `podman build --isolation=chroot`,
 * then the image's filesystem exported), and run from that filesystem under chroot on the real
 * /dev/kmsg: this machine reaches no container registry and cannot start OCI containers.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { uniquePci, writeKmsg } from '../helpers/agent-process.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const hasPodman = spawnSync('sh', ['-c', 'command -v podman && command -v debootstrap'], { encoding: 'utf8' }).status === 0;

interface Stage {
  from: string;
  /** FROM's --platform, where given. */
  platform?: string;
  name?: string;
  lines: string[];
}

/** The Dockerfile's stages with their instructions (continuation lines joined). */
function dockerfileStages(): { args: string[]; stages: Stage[] } {
  const text = readFileSync(path.join(root, 'Dockerfile'), 'utf8').replace(/\\\n/g, ' ');
  const args: string[] = [];
  const stages: Stage[] = [];
  for (const raw of text.split('\n')) {
    const line = raw.trim();
    if (!line || line.startsWith('#')) continue;
    const m = /^FROM\s+(?:--platform=(\S+)\s+)?(\S+)(?:\s+AS\s+(\S+))?/i.exec(line);
    if (m) stages.push({ from: m[2], ...(m[1] ? { platform: m[1] } : {}), ...(m[3] ? { name: m[3] } : {}), lines: [] });
    else if (stages.length) stages.at(-1)!.lines.push(line);
    else args.push(line);
  }
  return { args, stages };
}

test('Dockerfile: a build stage, then a final stage on a base image argument that runs `vigil run` as root', () => {
  const { args, stages } = dockerfileStages();
  assert.equal(stages.length, 2);
  const [build, final] = stages as [Stage, Stage];
  assert.equal(build.name, 'build');
  assert.equal(final.from, '${BASE_IMAGE}');
  // Multi-architecture: the build stage runs on the builder's own architecture and cross-builds the
  // target's native parts; the final stage is the target's base.
  assert.equal(build.platform, '$BUILDPLATFORM');
  assert.equal(final.platform, undefined);
  assert.ok(build.lines.includes('ARG TARGETARCH'));
  assert.ok(
    args.some((a) => /^ARG BASE_IMAGE=\S*node:24-/.test(a)),
    'BASE_IMAGE defaults to a public Node 24 image',
  );
  assert.ok(
    args.some((a) => /^ARG BUILD_IMAGE=\S*node:24-/.test(a)),
    'BUILD_IMAGE defaults to the same Node line (re2 is built against its headers)',
  );
  assert.ok(build.lines.some((l) => l.includes('npm run build')));
  // Production packages for the target apart from the build's: npm picks optional native packages by --cpu.
  assert.ok(build.lines.some((l) => /npm ci --omit=dev .*--cpu=/.test(l)));
  // Native RE2 is compiled in the build stage only: no compiler reaches the final image.
  assert.ok(build.lines.some((l) => /apt-get install .*\bg\+\+/.test(l) && l.includes('make')));
  assert.ok(build.lines.some((l) => l.includes('node-gyp rebuild') && l.includes('strip')));
  assert.ok(!final.lines.some((l) => /(?:^|\s)(g\+\+|gcc|make|python3|node-gyp)(?:\s|$)/.test(l)), 'no build tool in the final stage');
  assert.deepEqual(
    final.lines.filter((l) => l.startsWith('ENTRYPOINT')),
    ['ENTRYPOINT ["/usr/local/bin/node", "--disable-sigusr1", "/app/bin/vigil.js"]'],
  );
  assert.deepEqual(
    final.lines.filter((l) => l.startsWith('CMD')),
    ['CMD ["run"]'],
  );
  assert.deepEqual(
    final.lines.filter((l) => l.startsWith('USER')),
    ['USER 0:0'],
  );
  // The final stage copies built output only, never the sources or the dev toolchain.
  const copies = final.lines.filter((l) => l.startsWith('COPY'));
  assert.deepEqual(copies.map((l) => l.split(/\s+/).at(-2)).sort(), ['/prod/node_modules', '/src/dist', '/src/package.json', 'bin']);
});

interface Built {
  image: string;
  sizeBytes: number;
  rootfs: string;
  entrypoint: string[];
  cmd: string[];
  user: string;
  env: string[];
  baseSeconds: number;
  buildSeconds: number;
}

test(
  'image: built with podman from the Dockerfile, it scans a log and runs the agent on the real /dev/kmsg under chroot',
  {
    skip: hasPodman ? false : 'podman or debootstrap is not installed (.ci/run installs both)',
    timeout: 30 * 60_000,
  },
  async (t) => {
    const out = mkdtempSync(path.join(os.tmpdir(), 'vigil-image-'));
    const mounts: string[] = [];
    t.after(() => {
      for (const m of mounts.reverse()) spawnSync('umount', ['-l', m]);
      rmSync(out, { recursive: true, force: true });
    });
    const r = spawnSync('bash', [path.join(root, 'test/deploy/build-image.sh'), out], { encoding: 'utf8', maxBuffer: 64 << 20 });
    assert.equal(r.status, 0, `build-image.sh failed:\n${r.stderr.slice(-6000)}`);
    const built = JSON.parse(r.stdout) as Built;
    const rootfs = built.rootfs;
    t.diagnostic(
      `image ${built.image}: ${(built.sizeBytes / 1e6).toFixed(1)} MB; base ${built.baseSeconds} s, podman build ${built.buildSeconds} s`,
    );

    await t.test('the image config runs `vigil run` as root, Node started with --disable-sigusr1', () => {
      assert.deepEqual(built.entrypoint, ['/usr/local/bin/node', '--disable-sigusr1', '/app/bin/vigil.js']);
      assert.deepEqual(built.cmd, ['run']);
      assert.equal(built.user, '0:0');
    });

    await t.test(
      'it holds dist/, production modules with koffi native code, and the two host tools; no npm, sources or source maps',
      () => {
        for (const p of [
          'app/dist/cli/main.js',
          'app/dist/.build-stamp',
          'app/node_modules/koffi',
          'app/node_modules/@koromix/koffi-linux-x64',
        ]) {
          assert.ok(existsSync(path.join(rootfs, p)), p);
        }
        for (const p of [
          'app/src',
          'app/node_modules/typescript',
          'app/node_modules/tsx',
          'usr/local/lib/node_modules/npm',
          'usr/local/bin/npm',
          'root/.npm',
        ]) {
          assert.ok(!existsSync(path.join(rootfs, p)), `${p} should not be in the image`);
        }
        for (const cc of ['gcc', 'cc', 'g++', 'make']) assert.ok(!existsSync(path.join(rootfs, 'usr/bin', cc)), `${cc} in the image`);
        const maps = (readdirSync(path.join(rootfs, 'app'), { recursive: true }) as string[]).filter((f) => f.endsWith('.map'));
        assert.deepEqual(maps, []);
        for (const [tool, arg] of [
          ['/usr/sbin/ethtool', '--version'],
          ['/usr/bin/systemctl', '--version'],
        ] as const) {
          const v = spawnSync('chroot', [rootfs, tool, arg], { encoding: 'utf8' });
          assert.equal(v.status, 0, `${tool}: ${v.stderr}`);
        }
      },
    );

    await t.test('it carries native RE2 built for its Node and stripped (re2.node alone, no build tree or node-gyp), and it loads', () => {
      const node = path.join(rootfs, 'app/node_modules/re2/build/Release/re2.node');
      assert.ok(existsSync(node), 're2.node');
      const size = statSync(node).size;
      assert.ok(size < 4e6, `re2.node is ${(size / 1e6).toFixed(1)} MB (unstripped about 20 MB)`);
      for (const p of [
        'app/node_modules/re2/vendor',
        'app/node_modules/re2/build/Release/obj.target',
        'app/node_modules/node-gyp',
        'app/node_modules/nan',
      ]) {
        assert.ok(!existsSync(path.join(rootfs, p)), `${p} should not be in the image`);
      }
      const r = spawnSync(
        'chroot',
        [
          rootfs,
          '/usr/local/bin/node',
          '-e',
          'const RE2 = require("/app/node_modules/re2"); process.stdout.write(new RE2("(?U)a(b+)", "u").exec("xabb")[1])',
        ],
        {
          encoding: 'utf8',
        },
      );
      assert.equal(r.status, 0, r.stderr);
      assert.equal(r.stdout, 'b');
    });

    // Devices and kernel filesystems as a container runtime would give them: the real /dev/kmsg.
    mkdirSync(path.join(rootfs, 'dev'), { recursive: true });
    for (const [name, minor] of [
      ['null', 3],
      ['zero', 5],
      ['urandom', 9],
      ['kmsg', 11],
    ] as const) {
      const dev = path.join(rootfs, 'dev', name);
      rmSync(dev, { force: true });
      assert.equal(spawnSync('mknod', ['-m', '0644', dev, 'c', '1', String(minor)]).status, 0, `mknod ${dev}`);
    }
    spawnSync('chmod', ['0666', path.join(rootfs, 'dev/null')]);
    for (const [fs, dir] of [
      ['proc', 'proc'],
      ['sysfs', 'sys'],
    ] as const) {
      const target = path.join(rootfs, dir);
      mkdirSync(target, { recursive: true });
      assert.equal(spawnSync('mount', ['-t', fs, fs, target]).status, 0, `mount ${fs}`);
      mounts.push(target);
    }
    const inImage = (args: string[]) => [rootfs, ...built.entrypoint, ...args];
    const env = {
      PATH: '/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin',
      ...Object.fromEntries(built.env.map((e): [string, string] => [e.slice(0, e.indexOf('=')), e.slice(e.indexOf('=') + 1)])),
    };

    await t.test("its Node is 24, and with the entrypoint's flags SIGUSR1 opens no inspector (without them it does)", () => {
      const [node, ...flags] = built.entrypoint.slice(0, -1);
      const v = spawnSync('chroot', [rootfs, node, '--version'], { encoding: 'utf8', env });
      assert.equal(v.status, 0, v.stderr);
      assert.match(v.stdout.trim(), /^v24\.\d+\.\d+$/);
      // No listener in the probe, so only the flag stands between SIGUSR1 and the inspector. It
      // waits up to 3 s for the inspector to open; port 0: a free port, not 9229.
      const probe =
        'process.kill(process.pid, "SIGUSR1"); const inspector = require("node:inspector"); let n = 0; ' +
        'const t = setInterval(() => { if (inspector.url() || ++n === 60) { clearInterval(t); process.stdout.write(String(inspector.url())); process.exit(0); } }, 50);';
      const probeWith = (f: string[]) =>
        spawnSync('chroot', [rootfs, node, ...f, '--inspect-port=0', '-e', probe], { encoding: 'utf8', env, timeout: 60_000 });
      const off = probeWith(flags);
      assert.equal(off.status, 0, off.stderr);
      assert.equal(off.stdout, 'undefined');
      const on = probeWith([]);
      assert.equal(on.status, 0, on.stderr);
      assert.match(on.stdout, /^ws:\/\/127\.0\.0\.1:\d+\//);
    });

    await t.test('`vigil scan --json` classifies a log file inside the image', () => {
      mkdirSync(path.join(rootfs, 'tmp'), { recursive: true });
      writeFileSync(
        path.join(rootfs, 'tmp/scan.log'),
        '[  101.000002] NVRM: Xid (PCI:0000:3b:00): 48, pid=77, name=train, DBE (0x1,0x2)\n',
      );
      const s = spawnSync('chroot', inImage(['scan', '--json', '/tmp/scan.log']), { encoding: 'utf8', env, timeout: 120_000 });
      assert.equal(s.status, 0, s.stderr);
      const rows = s.stdout
        .trim()
        .split('\n')
        .map((l) => JSON.parse(l) as Record<string, unknown>);
      assert.deepEqual(
        rows.map((x) => [x.reason, x.entity]),
        [['NvidiaXID48Error', 'gpu:0000:3b:00']],
      );
    });

    await t.test('`vigil run --standalone` reads the real /dev/kmsg inside the image and serves /healthz and /metrics', async () => {
      const child = spawn('chroot', inImage(['run', '--standalone', '--listen', '127.0.0.1:0', '--state-dir', '/var/lib/vigil']), {
        env,
        stdio: ['ignore', 'pipe', 'pipe'],
      });
      const exited = new Promise<number | null>((resolve) => child.once('exit', (code) => resolve(code)));
      t.after(async () => {
        if (child.exitCode === null) child.kill('SIGKILL');
        await exited;
      });
      const lines: Record<string, unknown>[] = [];
      let stderr = '';
      let buf = '';
      child.stderr.on('data', (d) => (stderr += d));
      child.stdout.on('data', (d: Buffer) => {
        buf += d.toString();
        for (let i; (i = buf.indexOf('\n')) >= 0; buf = buf.slice(i + 1)) {
          try {
            lines.push(JSON.parse(buf.slice(0, i)) as Record<string, unknown>);
          } catch {
            // not a log line
          }
        }
      });
      const waitLine = async (what: string, pred: (l: Record<string, unknown>) => boolean) => {
        for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((res) => setTimeout(res, 100))) {
          const hit = lines.find(pred);
          if (hit) return hit;
          if (child.exitCode !== null) break;
        }
        throw new Error(
          `no ${what} line; exit ${child.exitCode}; stderr: ${stderr.slice(-2000)}; last: ${JSON.stringify(lines.slice(-5))}`,
        );
      };
      const started = await waitLine('started', (l) => l.event === 'started');
      const port = Number(String(started.listen).split(':').pop());

      const pci = uniquePci();
      writeKmsg(`NVRM: Xid (PCI:${pci}): 48, pid=77, name=image-test, DBE (0x1,0x2)`);
      const finding = await waitLine('finding', (l) => l.event === 'finding' && l.entity === `gpu:${pci}`);
      assert.equal(finding.reason, 'NvidiaXID48Error');

      const livez = await fetch(`http://127.0.0.1:${port}/livez`);
      assert.equal(livez.status, 200);
      const metrics = await (await fetch(`http://127.0.0.1:${port}/metrics`)).text();
      assert.match(metrics, /^vigil_findings_total\{[^}]*reason="NvidiaXID48Error"/m);

      child.kill('SIGTERM');
      assert.equal(await exited, 0, stderr);
    });
  },
);
