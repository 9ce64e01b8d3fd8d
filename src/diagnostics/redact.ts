/**
 * Redaction of secrets from everything a diagnostic bundle holds. Every collector's output goes
 * through redactText before it is written, so a secret on a process command line, in a journal
 * line or in a configuration file is replaced alike. Format-agnostic and line-based on purpose:
 * the bundle holds YAML, JSON, TOML, INI, systemd units, env files and free text, and a parser per
 * format would fail open on the first file it cannot parse. What it replaces:
 *
 * - PEM private key blocks (and any PEM block under a secret key);
 * - `Authorization` / `Proxy-Authorization` / `Cookie` header values, `Bearer` and `Basic` credentials;
 * - the value of any key whose name says it holds a secret (password, token, secret, api key,
 *   access key, private key, credentials, kubeconfig client-key-data and client-certificate-data,
 *   docker/containerd `auth` and `identitytoken`...), as `key: v`, `key = "v"`, `"key": "v"`,
 *   `KEY=v`, `--key=v` and `--key v`, and a YAML block scalar (`key: |`) under such a key;
 * - token shapes that are secrets wherever they appear: AWS access key ids, JWTs (service account
 *   tokens), GitHub, GitLab and Slack tokens, and passwords in URLs (`https://user:pw@host`).
 */

export const REDACTED = '[REDACTED]';

export interface Redaction {
  text: string;
  /** Values replaced. */
  count: number;
}

/**
 * Key names (lower-cased, without `-`, `_`, `.` and spaces) whose values are secrets: a key that
 * ends with one of these (bootstrapToken, AWS_SECRET_ACCESS_KEY, identitytoken) or is one of EXACT.
 */
const SECRET_KEY_SUFFIXES = [
  'password',
  'passwd',
  'passphrase',
  'secret',
  'secrets',
  'token',
  'tokens',
  'apikey',
  'accesskey',
  'secretkey',
  'privatekey',
  'credential',
  'credentials',
  'clientkeydata',
  'clientcertificatedata',
  'signature',
  'sessionkey',
  // net.ipv4.tcp_fastopen_key in `sysctl -a`: the server's cookie secret.
  'fastopenkey',
  'authorization',
  'cookie',
];
const EXACT_SECRET_KEYS = new Set(['auth', 'pwd', 'pass', 'sig', 'xamzcredential', 'clientkey']);

export function isSecretKey(key: string): boolean {
  const k = key.toLowerCase().replace(/[-_.\s]/g, '');
  if (!k) return false;
  return EXACT_SECRET_KEYS.has(k) || SECRET_KEY_SUFFIXES.some((s) => k.endsWith(s));
}

const PEM_BEGIN = /-----BEGIN ([A-Z0-9 ]*)-----/;
const PEM_END = /-----END ([A-Z0-9 ]*)-----/;

/** Token shapes that are secrets on their own. */
const TOKEN_SHAPES: RegExp[] = [
  // AWS access key ids (long-term AKIA, temporary ASIA, and the other documented prefixes).
  /\b(?:AKIA|ASIA|AGPA|AIDA|AROA|AIPA|ANPA|ANVA|APKA)[A-Z0-9]{16}\b/g,
  // JWTs: Kubernetes service account tokens, OIDC id tokens.
  /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/g,
  // GitHub, GitLab, Slack tokens.
  /\b(?:gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|glpat-[A-Za-z0-9_-]{20,}|xox[abposr]-[A-Za-z0-9-]{10,})/g,
];

/** `Authorization: <anything to the end of the line>`, also quoted (`"Authorization": "..."`) and as a curl -H argument. */
const AUTH_HEADER = /\b((?:proxy-)?authorization|cookie|set-cookie|x-api-key|x-auth-token)(["']?\s*[:=]\s*)(\[?\s*["']?)([^\r\n"'\]]+)/gi;
/** `Bearer x` / `Basic x` anywhere (a header split across fields, a log line). */
const SCHEME_CREDENTIAL = /\b(Bearer|Basic)(\s+)([A-Za-z0-9._~+/=-]{6,})/g;
/** scheme://user:password@host */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@]+:)([^\s@/]+)(@)/gi;
/**
 * A key and its value on one line: optional quotes around the key, `:` or `=` (with spaces), then
 * a double-quoted, single-quoted or bare value. Keys may carry a `--` (command-line flags).
 */
const KEY_VALUE =
  /(^|[\s{,;(&?"'])(-{0,2})(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\3(\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&"'{}[\]][^\s,;&"'}\]]*)/g;
/** A line that is `key: value` / `key = value` / `export KEY=value` with a bare value: the value runs to the end of the line. */
const LINE_KEY_VALUE = /^(\s*(?:-\s+)?(?:export\s+)?)(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\2(\s*[:=]\s*)([^\s"'{[|>#].*)$/;
/** `name: AWS_SECRET_ACCESS_KEY` followed by `value: ...` (Kubernetes env lists, kubeconfig exec env). */
const NAME_LINE = /^\s*(?:-\s+)?["']?name["']?\s*:\s*["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*,?\s*$/;
const VALUE_LINE = /^(\s*(?:-\s+)?["']?value["']?\s*:\s*)(.*?)(,?\s*)$/;
/** `--password value` (a flag and its value as separate arguments). */
const FLAG_SPACE_VALUE = /(^|\s)(--?)([A-Za-z][A-Za-z0-9_.-]*)(\s+)(?!-)([^\s]+)/g;
/** A YAML key introducing a block scalar: `token: |` or `key: >-`. */
const BLOCK_SCALAR = /^(\s*)(-\s+)?["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*:\s*[|>][-+0-9]*\s*$/;

/** Replaces every secret found in `text`; see the module comment for what counts. */
export function redactText(text: string): Redaction {
  let count = 0;
  const lines = text.split('\n');
  const out: string[] = [];
  let pemKey = false;
  let inPem = false;
  let blockIndent = -1;
  let secretName = 0;
  for (let line of lines) {
    // The value that follows `name: SOME_SECRET` within the next two lines.
    if (secretName > 0) {
      secretName--;
      const v = VALUE_LINE.exec(line);
      if (v && v[2] !== '' && !v[2].includes(REDACTED)) {
        out.push(`${v[1]}${REDACTED}${v[3]}`);
        count++;
        secretName = 0;
        continue;
      }
    }
    // Inside a YAML block scalar under a secret key: every deeper-indented (or blank) line is the value.
    if (blockIndent >= 0) {
      const indent = line.length - line.trimStart().length;
      if (line.trim() === '' || indent > blockIndent) {
        if (line.trim() !== '') {
          out.push(`${line.slice(0, indent)}${REDACTED}`);
          count++;
        } else out.push(line);
        continue;
      }
      blockIndent = -1;
    }
    if (inPem) {
      const at = line.search(PEM_END);
      if (at >= 0) {
        inPem = false;
        // Keep the indentation (a key under a YAML block scalar), drop whatever else preceded the marker.
        out.push(`${/^\s*/.exec(line)![0]}${line.slice(at)}`);
      }
      continue;
    }
    const begin = PEM_BEGIN.exec(line);
    if (begin && (/PRIVATE KEY/.test(begin[1]) || pemKey)) {
      count++;
      const end = PEM_END.exec(line.slice(begin.index + begin[0].length));
      out.push(`${line.slice(0, begin.index + begin[0].length)}\n${/^\s*/.exec(line)![0]}${REDACTED}`);
      if (end) out.push(line.slice(begin.index + begin[0].length + end.index));
      else inPem = true;
      continue;
    }
    pemKey = false;
    const named = NAME_LINE.exec(line);
    if (named && isSecretKey(named[1])) secretName = 2;
    const block = BLOCK_SCALAR.exec(line);
    if (block && isSecretKey(block[3])) {
      blockIndent = block[1].length + (block[2]?.length ?? 0);
      pemKey = true;
      out.push(line);
      continue;
    }
    const r = redactLine(line);
    count += r.count;
    line = r.text;
    out.push(line);
  }
  return { text: out.join('\n'), count };
}

function redactLine(line: string): Redaction {
  let count = 0;
  let s = line;
  const kv = LINE_KEY_VALUE.exec(s);
  if (kv && isSecretKey(kv[3]) && !/^(?:null|~|true|false)\s*$/.test(kv[5])) {
    count++;
    s = `${kv[1]}${kv[2]}${kv[3]}${kv[2]}${kv[4]}${REDACTED}`;
  }
  s = s.replace(AUTH_HEADER, (_m, name: string, sep: string, quote: string, value: string) => {
    if (value.trim() === '' || value.includes(REDACTED)) return `${name}${sep}${quote}${value}`;
    count++;
    return `${name}${sep}${quote}${REDACTED}`;
  });
  s = s.replace(SCHEME_CREDENTIAL, (m, scheme: string, sp: string, value: string) => {
    if (value === REDACTED || value.startsWith('[REDACTED')) return m;
    count++;
    return `${scheme}${sp}${REDACTED}`;
  });
  s = s.replace(URL_PASSWORD, (_m, head: string, _pw: string, at: string) => {
    count++;
    return `${head}${REDACTED}${at}`;
  });
  s = s.replace(KEY_VALUE, (m, lead: string, dashes: string, q: string, key: string, sep: string, value: string) => {
    if (!isSecretKey(key)) return m;
    const bare = value.replace(/^["']|["']$/g, '');
    // Empty values, nested maps and values already replaced are left as they are.
    if (bare === '' || bare === REDACTED || bare === 'null' || bare === '~' || value === '|' || value.startsWith('>')) return m;
    count++;
    const quote = value.startsWith('"') ? '"' : value.startsWith("'") ? "'" : '';
    return `${lead}${dashes}${q}${key}${q}${sep}${quote}${REDACTED}${quote}`;
  });
  s = s.replace(FLAG_SPACE_VALUE, (m, lead: string, dashes: string, flag: string, sp: string, value: string) => {
    if (!isSecretKey(flag) || value === REDACTED) return m;
    count++;
    return `${lead}${dashes}${flag}${sp}${REDACTED}`;
  });
  for (const shape of TOKEN_SHAPES) {
    s = s.replace(shape, () => {
      count++;
      return REDACTED;
    });
  }
  return { text: s, count };
}
