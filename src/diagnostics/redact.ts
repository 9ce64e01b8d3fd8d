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
 *   tokens), GitHub, GitLab, Slack, Hugging Face, NGC, npm, PyPI, Docker Hub and Google API
 *   tokens, Kubernetes bootstrap tokens, and passwords in URLs (`https://user:pw@host`);
 * - arguments that are secrets only for some programs (`-p` is a port for ssh, redis-cli and psql,
 *   a password for mysql, `docker login` and sshpass): see PROGRAM_ARGS.
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
  // skopeo/crictl --creds, --src-creds: user:password.
  'creds',
  // Azure storage connection strings.
  'accountkey',
  // kubeadm --certificate-key decrypts the control plane's certificates.
  'certificatekey',
  // keytool -storepass, -keypass.
  'storepass',
  'keypass',
];
const EXACT_SECRET_KEYS = new Set([
  'auth',
  'pwd',
  'pass',
  'sig',
  'xamzcredential',
  'clientkey',
  'mysqlpwd',
  'rediscliauth',
  'requirepass',
  'masterauth',
]);

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
  // Hugging Face, NVIDIA NGC, npm, PyPI, Docker Hub tokens; Google API keys.
  /\b(?:hf_[A-Za-z0-9]{30,}|nvapi-[A-Za-z0-9_-]{20,}|npm_[A-Za-z0-9]{30,}|pypi-[A-Za-z0-9_-]{40,}|dckr_pat_[A-Za-z0-9_-]{20,}|AIza[A-Za-z0-9_-]{35})/g,
  // Slack and Discord webhooks: the URL is the credential.
  /\bhttps:\/\/(?:hooks\.slack\.com\/services|(?:discord|discordapp)\.com\/api\/webhooks)\/[^\s"'<>]+/g,
  // Kubernetes bootstrap tokens (kubeadm join --token, a bootstrap kubeconfig).
  /(?<![\w.-])[a-z0-9]{6}\.[a-z0-9]{16}(?![\w.-])/g,
];

/** `Authorization: <anything to the end of the line>`, also quoted (`"Authorization": "..."`) and as a curl -H argument. */
const AUTH_HEADER =
  /\b((?:proxy-)?authorization|cookie|set-cookie|x-api-key|x-auth-token|x-registry-auth|private-token)(["']?\s*[:=]\s*)(\[?\s*["']?)([^\r\n"'\]]+)/gi;
/** `Bearer x` / `Basic x` anywhere (a header split across fields, a log line). */
const SCHEME_CREDENTIAL = /\b(Bearer|Basic)(\s+)([A-Za-z0-9._~+/=-]{6,})/g;
/** scheme://user:password@host, and scheme://:password@host (redis). */
const URL_PASSWORD = /\b([a-z][a-z0-9+.-]*:\/\/[^\s:/@]*:)([^\s@/]+)(@)/gi;
/**
 * A key and its value on one line: optional quotes around the key, `:` or `=` (with spaces), then
 * a double-quoted, single-quoted or bare value. Keys may carry a `--` (command-line flags), and
 * may follow `=` or `:` (KUBELET_EXTRA_ARGS=--registry-password=x, --from-literal=password=x,
 * .npmrc's //registry/:_authToken=x).
 */
const KEY_VALUE =
  /(^|[\s{,;(&?"'=:])(-{0,2})(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\3(\s*[:=]\s*)("(?:[^"\\]|\\.)*"|'[^']*'|[^\s,;&"'{}[\]][^\s,;&"'}\]]*)/g;
/** A line that is `key: value` / `key = value` / `export KEY=value` with a bare value: the value runs to the end of the line. */
const LINE_KEY_VALUE = /^(\s*(?:-\s+)?(?:export\s+)?)(["']?)([A-Za-z_][A-Za-z0-9_.-]*)\2(\s*[:=]\s*)([^\s"'{[|>#].*)$/;
/** How deep pairs inside a value are read (KUBELET_EXTRA_ARGS=--node-labels=a=b is 2). */
const MAX_PAIR_DEPTH = 8;
/** `name: AWS_SECRET_ACCESS_KEY` followed by `value: ...` (Kubernetes env lists, kubeconfig exec env). */
const NAME_LINE = /^\s*(?:-\s+)?["']?name["']?\s*:\s*["']?([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*,?\s*$/;
const VALUE_LINE = /^(\s*(?:-\s+)?["']?value["']?\s*:\s*)(.*?)(,?\s*)$/;
/** `--password value` (a flag and its value as separate arguments). */
const FLAG_SPACE_VALUE = /(^|\s)(--?)([A-Za-z][A-Za-z0-9_.-]*)(\s+)(?!-)([^\s]+)/g;
/** `requirepass x` (redis.conf) and a netrc `password x` line: a secret key, spaces, one value. */
const SPACE_KEY_VALUE = /^(\s*(?:requirepass|masterauth|password|passwd)\s+)(\S+)(\s*)$/;
/** netrc on one line: `machine h login u password x`. */
const NETRC_PASSWORD = /(\blogin\s+\S+\s+password\s+)(\S+)/g;
/** openssl and keytool style `-passin pass:x`, `-passout pass:x`. */
const PASS_ARG = /(\s-pass(?:in|out)?\s+["']?pass:)([^\s"']+)/g;

/** A program's name as a command word: at the start, after whitespace, a quote or a path's `/`. */
const program = (names: string) => new RegExp(`(?:^|[\\s/"'=])(?:${names})(?=\\s)`);
/** `-X value`, `-Xvalue` and `-X=value`: $1 the flag and what joins it, $2 the value. */
const shortFlag = (letter: string) => new RegExp(`(\\s-${letter}(?:=|\\s+)?)((?!-)[^\\s"']+)`);
/** `-u user:password` / `--user=user:password` (curl, etcdctl, ctr): $2 is the part after the colon. */
const USER_PASSWORD = /(\s(?:-u|-U|--user|--proxy-user)(?:=|\s+)?["']?[^\s:"']*:)([^\s"']+)/;

/**
 * Arguments that are secrets only after certain programs: [program, the secret argument]. Only the
 * first match after the program's name is replaced, so `sshpass -p x ssh -p 22` keeps its port.
 */
const PROGRAM_ARGS: [RegExp, RegExp][] = [
  // mysql -pSECRET (attached only: `-p db` prompts, and db is the database).
  [
    program('mysql|mysqldump|mysqladmin|mysqlimport|mysqlshow|mysqlcheck|mysqlpump|mysqlbinlog|mariadb|mariadb-dump|mariadb-admin'),
    /(\s-p)([^\s"']+)/,
  ],
  // Registry logins: docker login -p x, helm registry login -p x, az login -p x.
  [/(?:^|[\s/"'])(?:docker|podman|nerdctl|buildah|skopeo|crane|oras|regctl|helm|finch|az)\s(?:.*\s)?login(?=\s)/, shortFlag('p')],
  [program('sshpass'), shortFlag('p')],
  [program('mongo|mongosh|mongodump|mongorestore|mongoexport|mongoimport|mongostat|mongotop'), shortFlag('p')],
  [program('redis-cli|valkey-cli|keydb-cli'), shortFlag('a')],
  [program('ldapsearch|ldapmodify|ldapadd|ldapdelete|ldapwhoami|ldappasswd|ldapcompare|ldapmodrdn|ldapexop'), shortFlag('w')],
  [program('ipmitool'), shortFlag('P')],
  [program('doctl'), shortFlag('t')],
  [program('openssl'), shortFlag('k')],
  // ssh-keygen -N new passphrase, -P old one.
  [program('ssh-keygen'), shortFlag('[NP]')],
  [program('curl|etcdctl|ctr|wget'), USER_PASSWORD],
  // smbclient -U user%password.
  [program('smbclient|rpcclient|smbcacls|mount\\.cifs'), /(\s(?:-U|--user)(?:=|\s+)?["']?[^\s%"']+%)([^\s"']+)/],
  // htpasswd -b[c] FILE USER PASSWORD.
  [program('htpasswd'), /(\s-[a-zA-Z]*b[a-zA-Z]*\s+\S+\s+\S+\s+)(\S+)/],
  [program('rabbitmqctl'), /(\s(?:add_user|change_password)\s+\S+\s+)(\S+)/],
  // Positional tokens: vault login TOKEN, wandb login KEY.
  [program('vault|wandb'), /(\slogin\s+)((?!-)[^\s="']+)(?=\s|$)/],
  // mc alias set NAME URL ACCESS_KEY SECRET_KEY.
  [program('mc'), /(\s(?:alias|config\s+host)\s+(?:set|add)\s+\S+\s+\S+\s+\S+\s+)(\S+)/],
  // aws configure set aws_secret_access_key VALUE.
  [program('aws'), /(\sconfigure\s+set\s+(?:\S*\.)?(?:aws_secret_access_key|aws_session_token)\s+)(\S+)/],
];

/** Any of PROGRAM_ARGS's programs, checked first: most lines name none. */
const PROGRAM_NAMES = new RegExp(PROGRAM_ARGS.map(([p]) => p.source).join('|'));

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
  const keyValues = (text: string, re = KEY_VALUE, depth = 0): string =>
    text.replace(re, (m, lead: string, dashes: string, q: string, key: string, sep: string, value: string) => {
      // A value may hold pairs itself: KUBELET_EXTRA_ARGS=--registry-password=x.
      if (!isSecretKey(key)) {
        if (!/[=:]/.test(value.slice(1))) return m;
        // Pairs nested deeper than any configuration writes them ("a:a:a:..." in a log line once
        // overflowed the stack and failed the whole capture): the rest is replaced, never kept unread.
        if (depth >= MAX_PAIR_DEPTH) {
          count++;
          return `${lead}${dashes}${q}${key}${q}${sep}${REDACTED}`;
        }
        return `${lead}${dashes}${q}${key}${q}${sep}${keyValues(value, new RegExp(KEY_VALUE), depth + 1)}`;
      }
      const bare = value.replace(/^["']|["']$/g, '');
      // Empty values, nested maps and values already replaced are left as they are.
      if (bare === '' || bare === REDACTED || bare === 'null' || bare === '~' || value === '|' || value.startsWith('>')) return m;
      count++;
      const quote = value.startsWith('"') ? '"' : value.startsWith("'") ? "'" : '';
      return `${lead}${dashes}${q}${key}${q}${sep}${quote}${REDACTED}${quote}`;
    });
  s = keyValues(s);
  s = s.replace(FLAG_SPACE_VALUE, (m, lead: string, dashes: string, flag: string, sp: string, value: string) => {
    if (!isSecretKey(flag) || value === REDACTED) return m;
    count++;
    return `${lead}${dashes}${flag}${sp}${REDACTED}`;
  });
  const replaceValue = (re: RegExp, text: string) =>
    text.replace(re, (m, head: string, value: string) => {
      if (value.startsWith(REDACTED)) return m;
      count++;
      return `${head}${REDACTED}`;
    });
  const spaced = SPACE_KEY_VALUE.exec(s);
  if (spaced && spaced[2] !== REDACTED) {
    count++;
    s = `${spaced[1]}${REDACTED}${spaced[3]}`;
  }
  s = replaceValue(NETRC_PASSWORD, s);
  s = replaceValue(PASS_ARG, s);
  if (PROGRAM_NAMES.test(s))
    for (const [name, arg] of PROGRAM_ARGS) {
      const at = name.exec(s);
      if (!at) continue;
      const from = at.index + at[0].length;
      s = s.slice(0, from) + replaceValue(arg, s.slice(from));
    }
  for (const shape of TOKEN_SHAPES) {
    s = s.replace(shape, () => {
      count++;
      return REDACTED;
    });
  }
  return { text: s, count };
}
