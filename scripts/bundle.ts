/**
 * The production build of dist/ (scripts/build.sh runs it after type-checking): esbuild bundles
 * src/ and its npm dependencies into a few ES modules, tree-shaken and minified.
 *
 * Why: run from per-file output, `vigil run` with the Kubernetes sink on loaded about 2,900 modules
 * (@kubernetes/client-node's generated API and model files, every API group) and idled at 115-145
 * MiB RSS. Bundled, one module costs far less than thousands (module records, source text): about
 * 80 MiB. Since the Kubernetes requests stopped using client-node's generated classes, those are left
 * out too (clientNodeSideEffectFree below): about 60 MiB, with the other savings in bin/vigil.js.
 *
 * Layout: every entry keeps its path (dist/cli/main.js for bin/vigil.js, the NVML and DCGM workers
 * and the diagnostics child, which are started by file); code shared or imported lazily goes into
 * dist/chunks/, so what `run` does not use (other commands, diagnostics, quarantine) is never
 * loaded. koffi stays external (native code), and so do the modules src/ loads through
 * createRequire (re2js in the kmsg read thread), which esbuild leaves alone: node_modules ships as before.
 *
 * `import.meta.url` in a source file is replaced by the URL that file would have in dist/, so
 * paths derived from it (the worker beside the NVML client, package.json, the diagnostics child)
 * stay right whichever chunk the code lands in.
 */
import { build, type Plugin } from 'esbuild';
import { mkdirSync, readdirSync, readFileSync, rmSync, rmdirSync, statSync, writeFileSync } from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const src = path.join(root, 'src');
// An argument builds elsewhere (a directory beside dist/, so package.json stays two levels up).
const dist = path.resolve(process.argv[2] ?? path.join(root, 'dist'));

/** Files that are started by path (bin/vigil.js, new Worker, a child process), relative to src/. */
const ENTRIES = ['cli/main.ts', 'sources/nvml/worker.ts', 'sources/dcgm/worker.ts', 'diagnostics/collect-child.ts'];

/** Outputs of an earlier build still younger than this are kept: a running agent may yet import one of its chunks. */
const KEEP_STALE_MS = 10 * 60_000;

const moduleUrl: Plugin = {
  name: 'vigil-module-url',
  setup(b) {
    b.onLoad({ filter: /\.ts$/ }, (args) => {
      if (!args.path.startsWith(src + path.sep)) return undefined;
      const text = readFileSync(args.path, 'utf8');
      if (!text.includes('import.meta.url')) return undefined;
      const asBuilt = path.relative(src, args.path).split(path.sep).join('/').replace(/\.ts$/, '.js');
      return { contents: text.replaceAll('import.meta.url', `__vigilModuleUrl(${JSON.stringify(asBuilt)})`), loader: 'ts' };
    });
  },
};

/**
 * node-fetch 2 (the Kubernetes client's HTTP layer) imports whatwg-url only as a fallback for
 * runtimes without a global URL (`Url.URL || whatwgUrl.URL`); loading it builds tr46's Unicode
 * mapping table, about 5 MiB of RSS. Node's own URL is what node-fetch uses anyway.
 */
const nodeUrlForWhatwgUrl: Plugin = {
  name: 'vigil-whatwg-url',
  setup(b) {
    b.onResolve({ filter: /^whatwg-url$/ }, () => ({ path: 'whatwg-url', namespace: 'vigil-shim' }));
    b.onLoad({ filter: /.*/, namespace: 'vigil-shim' }, () => ({
      contents: "const { URL, URLSearchParams } = require('node:url');\nmodule.exports = { URL, URLSearchParams };\n",
      loader: 'js',
    }));
  },
};

/**
 * @kubernetes/client-node declares no `sideEffects`, so esbuild keeps every module its index
 * imports, and their top-level code: the generated API classes and the model type map
 * (1.57 MB of the bundle). Its modules only define things, so they are marked side-effect free:
 * what Vigil's code does not reach (it uses KubeConfig, Watch and a few types; see
 * src/kube/client.ts) is left out of the chunks `run` loads.
 */
const clientNodeSideEffectFree: Plugin = {
  name: 'vigil-client-node-side-effect-free',
  setup(b) {
    b.onResolve({ filter: /.*/ }, async (args) => {
      if (args.pluginData === 'vigil-resolved' || !args.importer.includes(`${path.sep}@kubernetes${path.sep}client-node${path.sep}`))
        return undefined;
      const r = await b.resolve(args.path, {
        kind: args.kind,
        resolveDir: args.resolveDir,
        importer: args.importer,
        pluginData: 'vigil-resolved',
      });
      return r.path.includes(`${path.sep}@kubernetes${path.sep}client-node${path.sep}`) ? { ...r, sideEffects: false } : r;
    });
  },
};

/** Defines, per output file, `require` (for CommonJS dependencies) and __vigilModuleUrl (relative to dist/). */
function header(file: string): string {
  const up = '../'.repeat(path.relative(dist, path.dirname(file)).split(path.sep).filter(Boolean).length);
  return [
    "import { createRequire as __vigilCreateRequire } from 'node:module';",
    'const require = __vigilCreateRequire(import.meta.url);',
    `const __vigilModuleUrl = (p) => new URL(${JSON.stringify(up)} + p, import.meta.url).href;`,
    '',
  ].join('\n');
}

function removeStale(dir: string, keep: Set<string>, now: number): void {
  for (const e of readdirSync(dir, { withFileTypes: true })) {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) {
      removeStale(p, keep, now);
      if (readdirSync(p).length === 0) rmdirSync(p);
    } else if (!keep.has(p) && e.name !== '.build-stamp' && now - statSync(p).mtimeMs > KEEP_STALE_MS) {
      rmSync(p, { force: true });
    }
  }
}

const result = await build({
  absWorkingDir: root,
  entryPoints: ENTRIES.map((e) => path.join(src, e)),
  outdir: dist,
  outbase: src,
  entryNames: '[dir]/[name]',
  chunkNames: 'chunks/[name]-[hash]',
  bundle: true,
  splitting: true,
  format: 'esm',
  platform: 'node',
  target: 'node20',
  external: ['koffi'],
  // Whitespace and syntax only: identifiers keep their names, so stack traces stay readable.
  minifyWhitespace: true,
  minifySyntax: true,
  legalComments: 'none',
  write: false,
  logLevel: 'warning',
  plugins: [moduleUrl, nodeUrlForWhatwgUrl, clientNodeSideEffectFree],
});

const now = Date.now();
const written = new Set<string>();
for (const out of result.outputFiles) {
  mkdirSync(path.dirname(out.path), { recursive: true });
  writeFileSync(out.path, out.path.endsWith('.js') ? header(out.path) + out.text : out.contents);
  written.add(out.path);
}
mkdirSync(dist, { recursive: true });
removeStale(dist, written, now);
