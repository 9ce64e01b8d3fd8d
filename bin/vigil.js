#!/usr/bin/env node
// Runs the TypeScript sources directly through tsx, so `npm ci` is the whole install.
import { register } from 'tsx/esm/api';
register();
const { main } = await import('../src/cli/main.ts');
await main(process.argv);
