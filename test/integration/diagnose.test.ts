/**
 * `vigil diagnose` as an operator runs it: the real CLI, the real capture child under nice/ionice,
 * the real /dev/kmsg, /proc, and the host's tools; bundles unpacked with the system's tar. Hanging
 * commands come from VIGIL_DIAGNOSE_COMMANDS; in-process collectors that hang are given to
 * runCapture directly, since only code can make one.
 */
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, writeFileSync } from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { gunzipSync } from 'node:zlib';
import { type BundleManifest, type CollectorResult, runCapture } from '../../src/diagnostics/index.ts';
import { FakeNvmlEnv } from './nvml-helpers.ts';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const tmp = mkdtempSync(path.join(os.tmpdir(), 'vigil-diagnose-'));
test.after(() => rmSync(tmp, { recursive: true, force: true }));

function token(): string {
  return randomBytes(6).toString('hex');
}

interface Run {
  code: number | null;
  out: string;
  err: string;
}

/** Storm benchmarks overwrite the whole kernel ring under this lock (see the brief on the shared ring). */
const RING_LOCK = '/tmp/vigil-ring.lock';

/**
 * Runs the CLI. With `kmsg`, that record is written to /dev/kmsg first, and both run under the
 * ring lock, so a storm elsewhere cannot overwrite the record before the capture reads it.
 */
function vigil(args: string[], env: NodeJS.ProcessEnv = {}, kmsg?: string): Promise<Run> {
  const cli = [process.execPath, path.join(root, 'bin/vigil.js'), ...args];
  const [file, argv] = kmsg
    ? ['flock', ['-x', RING_LOCK, 'sh', '-c', 'printf "<6>%s\\n" "$0" > /dev/kmsg && exec "$@"', kmsg, ...cli]]
    : [cli[0], cli.slice(1)];
  return new Promise((resolve) => {
    execFile(
      file,
      argv,
      { encoding: 'utf8', timeout: 300_000, env: { ...process.env, ...env }, maxBuffer: 16 * 1024 * 1024 },
      (err, out, errOut) => resolve({ code: err ? ((err as { code?: number }).code ?? 1) : 0, out, err: errOut }),
    );
  });
}

/** Unpacks with the system's tar (an implementation independent of the one that wrote it). */
async function unpack(bundle: string): Promise<{ dir: string; manifest: BundleManifest; files: Map<string, number> }> {
  const dir = mkdtempSync(path.join(tmp, 'unpacked-'));
  await new Promise<void>((resolve, reject) => {
    execFile('tar', ['-xzf', bundle, '-C', dir], (err, _o, e) => (err ? reject(new Error(`tar: ${e || err.message}`)) : resolve()));
  });
  const files = new Map<string, number>();
  const walk = (d: string) => {
    for (const e of readdirSync(d, { withFileTypes: true })) {
      const p = path.join(d, e.name);
      if (e.isDirectory()) walk(p);
      else files.set(path.relative(dir, p), statSync(p).size);
    }
  };
  walk(dir);
  const manifest = JSON.parse(readFileSync(path.join(dir, 'manifest.json'), 'utf8')) as BundleManifest;
  return { dir, manifest, files };
}

function collector(m: BundleManifest, name: string): CollectorResult {
  const c = m.collectors.find((x) => x.name === name);
  assert.ok(c, `${name} is in the manifest: ${m.collectors.map((x) => x.name).join(', ')}`);
  return c;
}

test('the bundle is a valid tar.gz with a manifest of the requested categories, each collected file listed with its size', async () => {
  const t = token();
  const stateDir = path.join(tmp, `state-${t}`);
  mkdirSync(stateDir);
  const now = Date.now();
  writeFileSync(
    path.join(stateDir, 'state.json'),
    JSON.stringify({
      version: 1,
      engine: {
        version: 1,
        bootId: 'b',
        conditions: { AcceleratedHardwareReady: { status: 'False', lastTransitionTime: new Date(now).toISOString() } },
        problems: [
          {
            key: `NvidiaXID79Error|gpu:${t}`,
            reason: 'NvidiaXID79Error',
            severity: 'Fatal',
            condition: 'AcceleratedHardwareReady',
            entity: `gpu:${t}`,
            message: 'GPU has fallen off the bus',
            firstSeen: now - 1000,
            lastSeen: now,
            count: 1,
            recovery: { kind: 'untilReboot' },
            action: 'Replace',
            healthyStreak: 0,
          },
        ],
      },
    }),
  );
  const out = path.join(tmp, `bundle-${t}.tar.gz`);
  const r = await vigil(
    ['diagnose', '--categories', 'system,kernel,vigil', '--output', out, '--state-dir', stateDir, '--json'],
    {},
    `vigil-diagnose-test marker ${t}`,
  );
  assert.equal(r.code, 0, r.err);
  const printed = JSON.parse(r.out) as { path: string; bytes: number };
  assert.equal(printed.path, out);
  assert.equal(printed.bytes, statSync(out).size);
  // A gzip stream around a tar archive: the system's tar unpacks it.
  assert.deepEqual([...readFileSync(out).subarray(0, 2)], [0x1f, 0x8b]);
  const { dir, manifest, files } = await unpack(out);

  assert.equal(manifest.version, 1);
  assert.deepEqual(manifest.categories, ['kernel', 'vigil', 'system'], 'requested categories, in canonical order');
  assert.ok(!Number.isNaN(Date.parse(manifest.startedAt)) && Date.parse(manifest.endedAt) >= Date.parse(manifest.startedAt));
  for (const c of manifest.collectors) assert.ok(manifest.categories.includes(c.category), `${c.name} belongs to a requested category`);
  for (const cat of manifest.categories)
    assert.ok(
      [...files.keys()].some((f) => f.startsWith(`${cat}/`)),
      `${cat}/ has files`,
    );
  assert.ok(![...files.keys()].some((f) => /^(gpu|network|storage|runtime)\//.test(f)), 'nothing from other categories');
  let sum = 0;
  for (const c of manifest.collectors) {
    if (c.file === undefined) {
      assert.ok(c.skipped !== undefined || c.error !== undefined, `${c.name} wrote nothing and says why`);
      continue;
    }
    assert.equal(files.get(c.file), c.bytes, `${c.file} size matches the manifest`);
    sum += c.bytes;
  }
  assert.equal(manifest.totalBytes, sum);
  assert.equal(manifest.errors, manifest.collectors.filter((c) => c.error !== undefined).length);

  // What the categories hold: the live kernel ring, the agent's state, the node's processes.
  assert.match(
    readFileSync(path.join(dir, 'kernel/kmsg.log'), 'utf8'),
    new RegExp(`^\\d+,\\d+,\\d+,[^;]*;vigil-diagnose-test marker ${t}$`, 'm'),
  );
  assert.match(readFileSync(path.join(dir, 'kernel/info.json'), 'utf8'), /"bootId": "[0-9a-f-]{36}"/);
  const active = JSON.parse(readFileSync(path.join(dir, 'vigil/active.json'), 'utf8')) as { recentFindings: { entity: string }[] };
  assert.deepEqual(
    active.recentFindings.map((p) => p.entity),
    [`gpu:${t}`],
  );
  assert.ok(files.has('vigil/state.json'));
  assert.match(readFileSync(path.join(dir, 'system/processes.txt'), 'utf8'), /collect-child/, 'the capture sees its own process');
  assert.ok(files.has('system/pressure.txt') || collector(manifest, 'system/pressure').skipped, 'PSI collected where the kernel has it');

  // Collected at low priority, in a separate process.
  assert.ok(manifest.priority, 'the manifest records the priority');
  assert.equal(manifest.priority.nice, 19);
  if (existsSync('/usr/bin/ionice') || existsSync('/bin/ionice')) assert.equal(manifest.priority.ioClass, 'idle');
});

test('a collector that hangs is cut at its timeout with its process group killed, recorded, and the bundle still written', async () => {
  const t = token();
  const pidFile = path.join(tmp, `hang-${t}.pid`);
  const script = path.join(tmp, `hang-${t}.sh`);
  // The script starts a grandchild that would outlive a plain kill of the script.
  writeFileSync(script, `#!/bin/sh\necho "hang ${t} started"\nsleep 600 &\necho $! > ${pidFile}\nwait\n`, { mode: 0o755 });
  const out = path.join(tmp, `hang-${t}.tar.gz`);
  const started = Date.now();
  const r = await vigil(['diagnose', '--categories', 'system', '--collector-timeout', '2s', '--output', out, '--state-dir', tmp], {
    VIGIL_DIAGNOSE_COMMANDS: JSON.stringify({ 'system/hang': [script], 'system/sysctl': [script] }),
  });
  assert.equal(r.code, 0, r.err);
  const { dir, manifest } = await unpack(out);

  for (const name of ['system/hang', 'system/sysctl']) {
    const c = collector(manifest, name);
    assert.equal(c.timedOut, true, `${name} timed out`);
    assert.match(c.error ?? '', /timed out/);
    assert.ok(c.durationMs >= 1900 && c.durationMs < 60_000, `${name} ended at its timeout (${c.durationMs} ms), not the script's 600 s`);
    // Output written before the timeout is kept.
    assert.match(readFileSync(path.join(dir, c.file!), 'utf8'), new RegExp(`hang ${t} started`));
  }
  assert.ok(manifest.errors >= 2);
  assert.ok(Date.now() - started < 200_000);
  // The other collectors of the category ran and wrote their files.
  for (const name of ['system/processes', 'system/memory', 'system/uptime']) {
    const c = collector(manifest, name);
    assert.equal(c.error, undefined, `${name}: ${c.error}`);
    assert.ok(c.bytes > 0, `${name} collected`);
  }
  // The grandchild went with its process group.
  const pid = Number(readFileSync(pidFile, 'utf8').trim());
  assert.ok(pid > 0);
  let alive = true;
  for (let i = 0; i < 50 && alive; i++) {
    try {
      process.kill(pid, 0);
      await new Promise((res) => setTimeout(res, 100));
    } catch {
      alive = false;
    }
  }
  assert.equal(alive, false, `grandchild ${pid} was killed with the collector's process group`);
});

test('the capture time bound is honoured: a collector running into it is cut and the rest are skipped, recorded', async () => {
  const t = token();
  const script = path.join(tmp, `slow-${t}.sh`);
  writeFileSync(script, `#!/bin/sh\necho "slow ${t}"\nexec sleep 600\n`, { mode: 0o755 });
  const out = path.join(tmp, `bound-${t}.tar.gz`);
  const r = await vigil(['diagnose', '--categories', 'kernel,system', '--timeout', '6s', '--output', out, '--state-dir', tmp], {
    // The first collector would take 600 s; its own timeout (30 s by default) is beyond the bound.
    VIGIL_DIAGNOSE_COMMANDS: JSON.stringify({ 'kernel/kmsg': [script] }),
  });
  assert.equal(r.code, 0, r.err);
  const { manifest } = await unpack(out);
  assert.equal(manifest.timedOut, true);
  const slow = collector(manifest, 'kernel/kmsg');
  assert.equal(slow.timedOut, true);
  assert.ok(slow.durationMs < 6000, `cut at the capture's bound (${slow.durationMs} ms)`);
  const rest = manifest.collectors.filter((c) => c.name !== 'kernel/kmsg');
  assert.ok(rest.length > 0);
  for (const c of rest) assert.match(c.skipped ?? '', /time bound \(6000 ms\) was reached first/, c.name);
  assert.ok(Date.parse(manifest.endedAt) - Date.parse(manifest.startedAt) < 6000);
});

test('in-process collectors that never settle are abandoned at their timeout, and one that throws is recorded', async () => {
  const out = path.join(tmp, `inproc-${token()}.tar.gz`);
  let aborted = false;
  const result = await runCapture({ output: out, collectorTimeoutMs: 500, stateDir: tmp }, undefined, {
    collectors: [
      {
        name: 'system/stuck',
        category: 'system',
        file: 'system/stuck.txt',
        // Like an NVML call that never returns: ignores everything, settles never.
        run: (ctx) => {
          ctx.signal.addEventListener('abort', () => (aborted = true));
          return new Promise(() => {});
        },
      },
      { name: 'system/broken', category: 'system', file: 'system/broken.txt', run: () => Promise.reject(new Error('parser exploded')) },
      { name: 'system/fine', category: 'system', file: 'system/fine.txt', run: () => Promise.resolve({ data: 'all good\n' }) },
    ],
  });
  const { manifest, files } = await unpack(result.path);
  const stuck = collector(manifest, 'system/stuck');
  assert.equal(stuck.timedOut, true);
  assert.match(stuck.error ?? '', /timed out after 500 ms; abandoned/);
  assert.equal(aborted, true, "the collector's signal was aborted");
  assert.equal(collector(manifest, 'system/broken').error, 'parser exploded');
  assert.equal(files.get('system/fine.txt'), 'all good\n'.length);
  assert.equal(manifest.errors, 2);
});

test('the total size cap is honoured: later collectors are skipped and the bundle says it was truncated', async () => {
  const t = token();
  const out = path.join(tmp, `cap-${t}.tar.gz`);
  const cap = 48 * 1024;
  const r = await vigil([
    'diagnose',
    '--categories',
    'kernel,system',
    '--max-size',
    '48K',
    '--collector-max-size',
    '20K',
    '--output',
    out,
    '--state-dir',
    tmp,
  ]);
  assert.equal(r.code, 0, r.err);
  const { manifest, files } = await unpack(out);
  assert.ok(manifest.totalBytes <= cap, `${manifest.totalBytes} <= ${cap}`);
  const onDisk = [...files].filter(([f]) => f !== 'manifest.json').reduce((s, [, n]) => s + n, 0);
  assert.equal(onDisk, manifest.totalBytes);
  assert.equal(manifest.truncated, true);
  for (const c of manifest.collectors) assert.ok(c.bytes <= 20 * 1024, `${c.name}: ${c.bytes} bytes under the per-collector cap`);
  assert.ok(
    manifest.collectors.some((c) => c.truncated),
    'a collector was cut at its cap',
  );
  assert.ok(
    manifest.collectors.some((c) => /total size cap/.test(c.skipped ?? '')),
    'a later collector was skipped at the total cap',
  );
  // The kernel log keeps its newest records when cut.
  const kmsg = collector(manifest, 'kernel/kmsg');
  assert.match(kmsg.note ?? '', /oldest records left out/);
});

test('planted secrets in configuration files, process arguments and the kernel log never reach the bundle', async (t) => {
  const id = token();
  const secrets = {
    kubeToken: `kubetoken-${id}`,
    clientKey: `Y2xpZW50LWtleS1kYXRh${id}`,
    configComment: `comment-pw-${id}`,
    registryPassword: `registry-pw-${id}`,
    registryAuth: `cmVnaXN0cnk6${id}`,
    header: `aGVhZGVyLWF1dGg6${id}`,
    argPassword: `arg-pw-${id}`,
    kmsgBearer: `kmsgbearer${id}`,
    awsKey: `AKIA${id.toUpperCase().padEnd(16, 'Q').slice(0, 16)}`,
    pem: `pemkeybody${id}`,
  };
  const dir = path.join(tmp, `secrets-${id}`);
  mkdirSync(path.join(dir, 'certs.d/registry.example.com'), { recursive: true });
  const kubeconfig = path.join(dir, 'kubeconfig');
  writeFileSync(
    kubeconfig,
    [
      'apiVersion: v1',
      'kind: Config',
      'clusters:',
      '- name: c',
      '  cluster:',
      `    server: https://cluster-${id}.example.com:6443`,
      'contexts:',
      '- name: c',
      '  context: {cluster: c, user: u}',
      'current-context: c',
      'users:',
      '- name: u',
      '  user:',
      `    token: ${secrets.kubeToken}`,
      `    client-key-data: ${secrets.clientKey}`,
    ].join('\n'),
  );
  const config = path.join(dir, 'vigil.yaml');
  writeFileSync(
    config,
    [
      `# the registry password: ${secrets.configComment}`,
      `nodeName: node-${id}`,
      `stateDir: ${dir}/state`,
      'listen: 127.0.0.1:1',
      'kubernetes:',
      `  kubeconfig: ${kubeconfig}`,
    ].join('\n'),
  );
  writeFileSync(
    path.join(dir, 'config.toml'),
    [
      'version = 2',
      '[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]',
      `  username = "robot-${id}"`,
      `  password = "${secrets.registryPassword}"`,
      `  auth = "${secrets.registryAuth}"`,
      '[plugins.aws]',
      `  aws_access_key_id = "${secrets.awsKey}"`,
      '  tls_key = """',
      '-----BEGIN PRIVATE KEY-----',
      secrets.pem,
      '-----END PRIVATE KEY-----',
      '"""',
    ].join('\n'),
  );
  writeFileSync(
    path.join(dir, 'certs.d/registry.example.com/hosts.toml'),
    [
      'server = "https://registry.example.com"',
      '[host."https://mirror.example.com".header]',
      `  Authorization = "Basic ${secrets.header}"`,
    ].join('\n'),
  );
  // A process whose command line carries a password (`; :` keeps sh from exec'ing sleep).
  const proc = spawn('sh', ['-c', 'sleep 300; :', 'sh', `--password=${secrets.argPassword}`], { stdio: 'ignore', detached: true });
  t.after(() => process.kill(-proc.pid!, 'SIGKILL'));

  const out = path.join(tmp, `secrets-${id}.tar.gz`);
  const r = await vigil(
    [
      'diagnose',
      '--categories',
      'kernel,vigil,runtime,system',
      '--config',
      config,
      '--include-file',
      path.join(dir, 'config.toml'),
      '--include-file',
      path.join(dir, 'certs.d'),
      '--output',
      out,
    ],
    {},
    `vigil-diagnose-test ${id} retrying with Authorization: Bearer ${secrets.kmsgBearer}`,
  );
  assert.equal(r.code, 0, r.err);

  // The whole archive, decompressed: file contents, names and the manifest.
  const raw = gunzipSync(readFileSync(out)).toString('latin1');
  for (const [what, secret] of Object.entries(secrets)) assert.ok(!raw.includes(secret), `${what} (${secret}) is not in the bundle`);

  // And the files carrying them were collected, so the check above could have failed.
  const { dir: unpacked, manifest } = await unpack(out);
  const read = (f: string) => readFileSync(path.join(unpacked, f), 'utf8');
  assert.match(read('vigil/config.yaml'), new RegExp(`nodeName: node-${id}`));
  assert.match(read('vigil/kubeconfig'), new RegExp(`server: https://cluster-${id}\\.example\\.com:6443`));
  assert.match(read('vigil/kubeconfig'), /token: \[REDACTED\]/);
  const files = read('runtime/config-files.txt');
  assert.match(files, new RegExp(`username = "robot-${id}"`));
  assert.match(files, /password = "\[REDACTED\]"/);
  assert.match(files, /hosts\.toml <==/);
  assert.match(read('system/processes.txt'), /--password=\[REDACTED\]/);
  assert.match(read('kernel/kmsg.log'), new RegExp(`vigil-diagnose-test ${id} retrying with Authorization: \\[REDACTED\\]`));
  assert.ok((manifest.redactions ?? 0) >= Object.keys(secrets).length - 1, `redactions counted: ${manifest.redactions}`);
  assert.equal(manifest.node, `node-${id}`, 'the node name comes from the configuration');
});

test('gpu: the NVML inventory and every check come through the GPU monitor; NVML that cannot be loaded is recorded', async (t) => {
  // NVML's exact ABI through koffi into the C test double (native/fake-nvml), with a fake sysfs.
  const env = new FakeNvmlEnv(2);
  t.after(() => env.cleanup());
  env.gpu(1, { remappedRows: { pending: 1 } });
  const capture = async (library: string) => {
    const config = path.join(env.dir, `vigil-${token()}.yaml`);
    writeFileSync(config, `gpu:\n  libraryPath: ${library}\n  watchdog: 5s\n`);
    const out = path.join(tmp, `gpu-${token()}.tar.gz`);
    // The host root holds the fake sysfs; FAKE_NVML_CONFIG (set by FakeNvmlEnv) reaches the capture child.
    const r = await vigil(['diagnose', '--categories', 'gpu', '--config', config, '--host-root', env.dir, '--output', out]);
    assert.equal(r.code, 0, r.err);
    return unpack(out);
  };

  const ok = await capture(env.libraryPath);
  const report = JSON.parse(readFileSync(path.join(ok.dir, 'gpu/nvml.json'), 'utf8')) as {
    driverVersion: string;
    gpus: { uuid: string }[];
    checks: { check: string; gpu: number | null; status: string }[];
  };
  assert.equal(report.driverVersion, '550.54.15');
  assert.deepEqual(
    report.gpus.map((g) => g.uuid),
    ['GPU-00000000-aaaa-bbbb-cccc-000000000000', 'GPU-00000001-aaaa-bbbb-cccc-000000000001'],
  );
  assert.ok(report.checks.filter((c) => c.gpu === 0).length >= 16, 'every check of every GPU');
  assert.ok(report.checks.some((c) => c.gpu === 1 && c.check === 'rowRemapPending' && c.status === 'fail'));
  assert.match(collector(ok.manifest, 'gpu/nvml').note ?? '', /a GPU check fails/);
  // Not installed here: recorded, not fatal.
  if (!existsSync('/usr/bin/nvidia-smi'))
    assert.match(collector(ok.manifest, 'gpu/nvidia-smi').skipped ?? '', /nvidia-smi is not installed/);

  const broken = await capture(path.join(env.dir, 'missing-libnvidia-ml.so.1'));
  const unusable = JSON.parse(readFileSync(path.join(broken.dir, 'gpu/nvml.json'), 'utf8')) as { nvmlUsable: boolean };
  assert.equal(unusable.nvmlUsable, false);
  assert.match(collector(broken.manifest, 'gpu/nvml').note ?? '', /NVML unusable/);
});

test('bad arguments exit 2 with the flag named, before anything is collected', async () => {
  const r1 = await vigil(['diagnose', '--categories', 'kernel,bogus', '--output', path.join(tmp, 'never.tar.gz')]);
  assert.equal(r1.code, 2);
  assert.match(r1.err, /--categories: unknown category bogus; known: kernel, gpu/);
  const r2 = await vigil(['diagnose', '--max-size', 'lots', '--output', path.join(tmp, 'never.tar.gz')]);
  assert.equal(r2.code, 2);
  assert.match(r2.err, /--max-size: expected a size/);
  assert.equal(existsSync(path.join(tmp, 'never.tar.gz')), false);
});

/** Runs the CLI with a wall-clock limit of its own (the old code ran past 10 minutes here). */
function vigilTimed(args: string[], limitMs: number): Promise<Run & { ms: number; killed: boolean }> {
  const started = Date.now();
  return new Promise((resolve) => {
    const child = spawn(process.execPath, [path.join(root, 'bin/vigil.js'), ...args], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    child.stderr.on('data', (d: Buffer) => (err += d.toString()));
    let killed = false;
    const timer = setTimeout(() => {
      killed = true;
      child.kill('SIGKILL');
    }, limitMs);
    child.on('exit', (code) => {
      clearTimeout(timer);
      resolve({ code, out, err, ms: Date.now() - started, killed });
    });
  });
}

test('an --output that cannot be written fails at once with --output named, and nothing is collected', async () => {
  const t = token();
  // Node's recursive mkdir spins forever on /proc/nope; the old code ran past its own --timeout.
  const proc = await vigilTimed(['diagnose', '--categories', 'system', '--timeout', '20s', '--output', `/proc/nope-${t}/x.tar.gz`], 30_000);
  assert.equal(proc.killed, false, `still running after ${proc.ms} ms`);
  assert.equal(proc.code, 2, proc.err);
  assert.match(proc.err, new RegExp(`--output: cannot write /proc/nope-${t}/x\\.tar\\.gz: ENOENT`));
  assert.doesNotMatch(proc.err, /system\/processes/, 'no collector ran');
  assert.ok(proc.ms < 10_000, `answered in ${proc.ms} ms`);
  // A directory given as the bundle, and a parent that is a file.
  const file = path.join(tmp, `file-${t}`);
  writeFileSync(file, 'x');
  for (const [output, why] of [
    [tmp, /is a directory/],
    [path.join(file, 'x.tar.gz'), /ENOTDIR/],
  ] as const) {
    const r = await vigilTimed(['diagnose', '--categories', 'system', '--output', output], 30_000);
    assert.equal(r.code, 2, `${output}: ${r.err}`);
    assert.match(r.err, /--output: /);
    assert.match(r.err, why);
  }
});

test('diagnose never runs past its --timeout: a capture stuck in a read that cannot be interrupted is killed then, exit 1', async () => {
  const t = token();
  // Reading a FIFO nobody writes blocks the capture child's only thread (SIGTERM is not seen).
  const fifo = path.join(tmp, `fifo-${t}`);
  await new Promise<void>((resolve, reject) => execFile('mkfifo', [fifo], (e) => (e ? reject(new Error(e.message)) : resolve())));
  const out = path.join(tmp, `stuck-${t}.tar.gz`);
  const r = await vigilTimed(['diagnose', '--categories', 'runtime', '--include-file', fifo, '--timeout', '8s', '--output', out], 90_000);
  assert.equal(r.killed, false, `still running after ${r.ms} ms`);
  assert.equal(r.code, 1, r.err);
  assert.match(r.err, /did not finish within its time bound \(8000 ms\) and was killed/);
  // Counted from the command's start; spawning node and exiting add a little on either side.
  assert.ok(r.ms < 9500, `exited ${r.ms} ms after it was started`);
  assert.equal(existsSync(out), false);
  // The capture child went with it (its arguments carry the output path). It was sent SIGKILL
  // before the command exited; on a loaded machine the kernel may still be tearing it down, so allow 3 s.
  const capturesLeft = (): string[] =>
    readdirSync('/proc')
      .filter((p) => /^\d+$/.test(p))
      .filter((p) => {
        try {
          return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(`stuck-${t}`);
        } catch {
          return false;
        }
      });
  let left = capturesLeft();
  for (let i = 0; i < 30 && left.length; i++) {
    await new Promise((r) => setTimeout(r, 100));
    left = capturesLeft();
  }
  assert.deepEqual(left, [], 'no capture process left');
});
