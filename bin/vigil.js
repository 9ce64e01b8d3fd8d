#!/usr/bin/env node
// Runs the bundled agent from dist/ (built by `npm ci` through the prepare script: scripts/build.sh),
// or the TypeScript sources through tsx when dist/ is missing or older than a source file. The
// bundle is what a node should run: it starts faster, and with the Kubernetes sink on it idles at
// about 60 MiB RSS, against 115-145 MiB for per-file output (scripts/bundle.ts says why).
import { existsSync, readdirSync, statSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import path from 'node:path';
import v8 from 'node:v8';

// SIGUSR1 must not open the Node inspector: on the node's loopback it runs code as root for any
// local user or host-network pod. A listener replaces Node's inspector handler (checked on Node 20
// and 24: nothing listens on 9229 after `kill -USR1`), and stays for the process's life; `vigil
// run` logs each one. The image's entrypoint also starts Node (24) with --disable-sigusr1 (Node >=
// 22.14), which covers the moments before this line runs; this listener stays for other starts.
process.on('SIGUSR1', () => {});
// A SIGUSR1 that came before the listener (during Node's start) opened it: close it again, unless
// an --inspect flag asked for it (`vigil run` refuses that).
const inspector = process.features.inspector ? (await import('node:inspector')).default : undefined;
const inspectFlag = /(^|\s)--inspect(-brk|-wait)?(=|\s|$)/;
if (inspector?.url() && !inspectFlag.test([...process.execArgv, process.env.NODE_OPTIONS ?? ''].join(' '))) inspector.close();

// Sized for a small daemon (a flag given on the command line or in NODE_OPTIONS wins):
// - V8 grows each young-generation semi-space up to 16 MiB as it allocates, and keeps it resident;
//   1 MiB costs a few more scavenges and about 20 MiB less RSS.
// - No optimizing compilers (TurboFan, Sparkplug): their code in the node binary and the code they
//   make cost an idle agent with the GPU monitor on 16.1 MiB of RSS (68.8 -> 85.0; Sparkplug alone
//   2.6). Classification runs in the Ignition interpreter at about 46% of the speed (285,000 against
//   620,000 records/s; docs/benchmarks.md, "The optimizing compilers: off, by the numbers"); the
//   regular expressions, which do most of the work, are compiled to machine code either way.
const given = [...process.execArgv, process.env.NODE_OPTIONS ?? ''].join(' ');
if (!given.includes('semi-space')) v8.setFlagsFromString('--max-semi-space-size=1');
if (!/--(no-)?(opt|turbofan)\b/.test(given)) v8.setFlagsFromString('--no-opt');
if (!/--(no-)?sparkplug\b/.test(given)) v8.setFlagsFromString('--no-sparkplug');

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const stamp = path.join(root, 'dist', '.build-stamp');

function newestSource(dir) {
  let newest = 0;
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    newest = Math.max(newest, e.isDirectory() ? newestSource(p) : statSync(p).mtimeMs);
  }
  return newest;
}

// An image ships dist/ without src/: then there is nothing newer to compare against.
const src = path.join(root, 'src');
// VIGIL_FROM_SOURCE=0 keeps dist/ even when a source is newer (benchmarks build it first, then time it).
const fromSource =
  process.env.VIGIL_FROM_SOURCE === '1' ||
  !existsSync(stamp) ||
  (process.env.VIGIL_FROM_SOURCE !== '0' && existsSync(src) && newestSource(src) > statSync(stamp).mtimeMs);
let main;
if (fromSource) {
  const { register } = await import('tsx/esm/api');
  register();
  ({ main } = await import('../src/cli/main.ts'));
} else {
  ({ main } = await import('../dist/cli/main.js'));
}
await main(process.argv);
