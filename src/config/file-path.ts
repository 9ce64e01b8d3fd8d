/** Paths the configuration names. */
import * as z from 'zod';

/** A file path: at most PATH_MAX (4096) bytes, the longest the kernel opens. */
export const filePath = z.string().min(1, 'must not be empty').max(4096);
/** Rule files per list; each is read whole at start. */
export const MAX_RULE_FILES = 64;
