/**
 * Detection on the real-world corpus (test/fixtures/corpus): how many lines it holds and the share
 * of entries whose result through the scan pipeline is exactly their label. The unit test asserts
 * every one; this records the figure. Run alone: `npx tsx bench/corpus.ts`.
 */
import { pathToFileURL } from 'node:url';
import { entryLines, judge, loadCorpus } from '../test/helpers/corpus.ts';

export function benchCorpus(): { corpus_lines: number; corpus_exact_ratio: number } {
  const corpus = loadCorpus();
  let lines = 0;
  let exact = 0;
  for (const e of corpus) {
    lines += entryLines(e).length;
    if (judge(e).exact) exact++;
  }
  return { corpus_lines: lines, corpus_exact_ratio: corpus.length ? exact / corpus.length : 0 };
}

if (process.argv[1] && import.meta.url === pathToFileURL(process.argv[1]).href) {
  console.log(benchCorpus());
}
