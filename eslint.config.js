// Type-aware lint rules; `npm test` runs this at zero warnings.
import js from '@eslint/js';
import tseslint from 'typescript-eslint';

// `(err as Error)` hides what was really thrown; narrow with errorMessage()/instanceof instead.
// A later block's no-restricted-syntax replaces the earlier one's options, so each block repeats it.
const noErrorCast = {
  selector: "TSAsExpression > TSTypeReference > Identifier[name='Error']",
  message: 'Narrow unknown errors instead of casting them to Error.',
};

/**
 * The floors of src/ (docs/architecture.md), lowest first: a folder imports only folders on lower
 * floors. Each floor holds today; an arrow that still runs the wrong way is listed in ALLOWED_TODAY
 * (and in docs/architecture.md) until it is fixed, so the rest cannot drift. A new folder gets a floor here.
 */
const FLOORS = [
  ['util'],
  ['native', 'api', 'catalog'],
  ['config'],
  ['sources', 'scheduler', 'health', 'kube'],
  ['engine', 'monitors', 'state'],
  ['settings'],
  ['pipeline'],
  ['sinks', 'remediation', 'diagnostics'],
  ['app'],
  ['cli'],
];
/** Wrong-way arrows in the code today: `from>to`. */
const ALLOWED_TODAY = new Set([
  'api>catalog', // api/types.ts re-exports the generated CONDITION_TYPES
  'catalog>api',
  'config>diagnostics', // config/schema.ts: DIAGNOSTIC_CATEGORIES from diagnostics/bundle.ts
  'state>engine', // state/store.ts: the engine's and the GPU monitor's persisted shapes
  'state>monitors',
  'diagnostics>cli', // diagnostics/collectors/gpu.ts runs `vigil gpu` in process
]);
/** Floors stricter than the layers: `from>to` with why. */
const EXTRA = {
  'engine>sources': 'the engine is pure: it imports no source (findings come in, events go out)',
  'engine>scheduler': 'the engine is pure: it imports no I/O folder',
  'engine>health': 'the engine is pure: it imports no I/O folder',
  'engine>native': 'the engine is pure: it imports no I/O folder',
  'sources>catalog': 'sources know no rules: raw records only, no reasons',
  'sources>api': 'sources know no rules: raw records only, no findings',
  'sinks>engine': "sinks only receive: the root (src/app) adopts what a Node shows and feeds them the engine's events",
};
const floorOf = new Map(FLOORS.flatMap((names, i) => names.map((n) => [n, i])));
const floorName = (i) => `floor ${i}: ${FLOORS[i].join(', ')}`;

/** Why `from` may not import `to`, or undefined when it may. */
function forbidden(from, to) {
  if (from === to || ALLOWED_TODAY.has(`${from}>${to}`)) return undefined;
  if (EXTRA[`${from}>${to}`]) return `src/${from} must not import src/${to}: ${EXTRA[`${from}>${to}`]} (docs/architecture.md).`;
  const a = floorOf.get(from);
  const b = floorOf.get(to);
  if (b > a)
    return `src/${from} (${floorName(a)}) must not import src/${to} (${floorName(b)}): imports point down only (docs/architecture.md).`;
  if (b === a) return `src/${from} and src/${to} share ${floorName(a)}: neither imports the other (docs/architecture.md).`;
  return undefined;
}

/** One block per src folder: no-restricted-imports for static imports, no-restricted-syntax for import(). */
const floorBlocks = [...floorOf.keys()].map((from) => {
  const denied = [...floorOf.keys()].map((to) => [to, forbidden(from, to)]).filter(([, why]) => why);
  return {
    files: [`src/${from}/**/*.ts`],
    rules: {
      'no-restricted-imports': ['error', { patterns: denied.map(([to, message]) => ({ regex: `^(\\.\\./)+${to}(/|$)`, message })) }],
      'no-restricted-syntax': [
        'error',
        noErrorCast,
        ...denied.map(([to, message]) => ({ selector: `ImportExpression[source.value=/^(\\.\\.\\/)+${to}(\\/|$)/]`, message })),
      ],
    },
  };
});

const TEST_ENTRY = 'Tests import a src folder only through its public entry, src/<folder>/index.ts (docs/architecture.md).';

export default tseslint.config(
  { ignores: ['dist/**', 'node_modules/**', '.cache/**', '.cluster/**', 'src/catalog/reasons.generated.ts', 'bench/results/**'] },
  js.configs.recommended,
  ...tseslint.configs.recommendedTypeChecked,
  {
    languageOptions: {
      parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname },
    },
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_', caughtErrors: 'none' }],
      '@typescript-eslint/no-floating-promises': [
        'error',
        {
          allowForKnownSafeCalls: [{ from: 'package', name: ['test', 'it', 'describe', 'suite', 'before', 'after'], package: 'node:test' }],
        },
      ],
      '@typescript-eslint/consistent-type-imports': 'error',
      'no-restricted-syntax': ['error', noErrorCast],
      'max-len': ['error', { code: 140, ignoreUrls: true, ignoreStrings: true, ignoreTemplateLiterals: true, ignoreRegExpLiterals: true }],
    },
  },
  ...floorBlocks,
  {
    files: ['test/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/src/*/**', '!**/src/*/index.ts'], message: TEST_ENTRY }] }],
      'no-restricted-syntax': [
        'error',
        noErrorCast,
        { selector: 'ImportExpression[source.value=/(^|\\/)src\\/[^/]+\\/(?!index\\.ts$)/]', message: TEST_ENTRY },
      ],
    },
  },
  { files: ['**/*.js'], ...tseslint.configs.disableTypeChecked },
  {
    // Plain Node scripts (bin/, this file): declare the Node globals they use.
    files: ['**/*.js'],
    languageOptions: {
      globals: {
        process: 'readonly',
        console: 'readonly',
        Buffer: 'readonly',
        URL: 'readonly',
        setTimeout: 'readonly',
        clearTimeout: 'readonly',
      },
    },
  },
);
