import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REDACTED, isSecretKey, redactText } from '../../src/diagnostics/redact.ts';

/** Each secret must be gone from the output and each kept string still there. */
function check(input: string, secrets: string[], kept: string[] = []): string {
  const { text, count } = redactText(input);
  for (const s of secrets) assert.ok(!text.includes(s), `secret ${JSON.stringify(s)} survived in:\n${text}`);
  for (const k of kept) assert.ok(text.includes(k), `${JSON.stringify(k)} was lost from:\n${text}`);
  if (secrets.length) assert.ok(count >= 1 && text.includes(REDACTED), 'the redactions are counted and marked');
  return text;
}

test('kubeconfig client certificates, keys, tokens and exec credentials are redacted; names and servers stay', () => {
  check(
    [
      'apiVersion: v1',
      'clusters:',
      '- cluster:',
      '    server: https://10.0.0.1:6443',
      '  name: prod',
      'users:',
      '- name: admin',
      '  user:',
      '    client-certificate-data: LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNFUlREQVRB',
      '    client-key-data: LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpLRVlEQVRB',
      '    token: s3cr3t-kube-token-value',
      '    auth-provider:',
      '      config:',
      '        id-token: idtok-123456789',
      '        refresh-token: "refresh-987654321"',
      '        client-secret: oidc-client-secret',
      '    exec:',
      '      env:',
      '      - name: AWS_SECRET_ACCESS_KEY',
      '        value: wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
      '      - name: AWS_PROFILE',
      '        value: prod-profile',
    ].join('\n'),
    [
      'LS0tLS1CRUdJTiBDRVJUSUZJQ0FURS0tLS0tCkNFUlREQVRB',
      'LS0tLS1CRUdJTiBSU0EgUFJJVkFURSBLRVktLS0tLQpLRVlEQVRB',
      's3cr3t-kube-token-value',
      'idtok-123456789',
      'refresh-987654321',
      'oidc-client-secret',
      'wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY',
    ],
    ['server: https://10.0.0.1:6443', 'name: admin', 'value: prod-profile', 'client-key-data:', 'token:'],
  );
});

test('containerd registry credentials and header tables in TOML are redacted', () => {
  check(
    [
      '[plugins."io.containerd.grpc.v1.cri".registry.configs."registry.example.com".auth]',
      '  username = "robot"',
      '  password = "registry-pass-123"',
      '  auth = "cm9ib3Q6cmVnaXN0cnktcGFzcy0xMjM="',
      '  identitytoken = "identity-token-xyz"',
      '[host."https://mirror.example.com".header]',
      '  Authorization = ["Basic bWlycm9yOnB3ZA=="]',
      '  x-api-key = "mirror-api-key-1"',
    ].join('\n'),
    ['registry-pass-123', 'cm9ib3Q6cmVnaXN0cnktcGFzcy0xMjM=', 'identity-token-xyz', 'bWlycm9yOnB3ZA==', 'mirror-api-key-1'],
    ['username = "robot"', 'registry.example.com'],
  );
});

test('Authorization headers, bearer tokens and URL passwords are redacted in free text', () => {
  check(
    [
      "curl -H 'Authorization: Bearer abc.def.ghi-123' https://api.example.com",
      'GET /v1 HTTP/1.1\r',
      'authorization: Basic dXNlcjpwYXNzd29yZA==\r',
      'Proxy-Authorization: Negotiate YIIFXAYGKwYBBQUCoIIFUDCC',
      'Cookie: session=cookie-value-42',
      'retrying with Bearer tok_live_998877 after 401',
      'pulling from https://deploy:hunter2-url-pw@git.example.com/repo.git',
    ].join('\n'),
    ['abc.def.ghi-123', 'dXNlcjpwYXNzd29yZA==', 'YIIFXAYGKwYBBQUCoIIFUDCC', 'cookie-value-42', 'tok_live_998877', 'hunter2-url-pw'],
    ['https://api.example.com', 'git.example.com/repo.git', 'deploy:'],
  );
});

test('secrets on command lines and in environment files are redacted; other flags stay', () => {
  check(
    [
      '1234 root /usr/bin/kubelet --token=flag-token-1 --node-ip=10.0.0.5 --password flag-password-2 --v=2',
      'export AWS_SECRET_ACCESS_KEY=env-secret-access-key',
      'AWS_ACCESS_KEY_ID=AKIAIOSFODNN7EXAMPLE',
      'DB_PASSWORD="p@ss word"',
      'GITHUB_TOKEN=ghp_abcdefghijklmnopqrstuvwxyz0123456789',
      'NODE_NAME=ip-10-0-0-5',
    ].join('\n'),
    [
      'flag-token-1',
      'flag-password-2',
      'env-secret-access-key',
      'AKIAIOSFODNN7EXAMPLE',
      'p@ss word',
      'ghp_abcdefghijklmnopqrstuvwxyz0123456789',
    ],
    ['--node-ip=10.0.0.5', '--v=2', 'NODE_NAME=ip-10-0-0-5'],
  );
});

test('access key ids, JWTs and chat tokens are redacted wherever they appear', () => {
  const jwt = 'eyJhbGciOiJSUzI1NiIsImtpZCI6IjEifQ.eyJzdWIiOiJzeXN0ZW06c2VydmljZWFjY291bnQifQ.c2lnbmF0dXJlLXNpZ25hdHVyZQ';
  check(`found credentials ASIAY34FZKBOKMUTVV7A in log; sa ${jwt}; slack xoxb-1234567890-abcdefghij`, [
    'ASIAY34FZKBOKMUTVV7A',
    jwt,
    'xoxb-1234567890-abcdefghij',
  ]);
});

test('PEM private keys and block scalars under secret keys are redacted whole; certificates elsewhere stay', () => {
  check(
    [
      '-----BEGIN RSA PRIVATE KEY-----',
      'MIIEowIBAAKCAQEAprivatekeyline1',
      'privatekeyline2',
      '-----END RSA PRIVATE KEY-----',
      'tls:',
      '  key: |',
      '    -----BEGIN EC PRIVATE KEY-----',
      '    ecprivatekeybody',
      '    -----END EC PRIVATE KEY-----',
      '  token: |-',
      '    multi-line-token-part-1',
      '    multi-line-token-part-2',
      '  caFile: /etc/ca.crt',
      '-----BEGIN CERTIFICATE-----',
      'MIIBpublicCertificateBody',
      '-----END CERTIFICATE-----',
    ].join('\n'),
    ['MIIEowIBAAKCAQEAprivatekeyline1', 'privatekeyline2', 'ecprivatekeybody', 'multi-line-token-part-1', 'multi-line-token-part-2'],
    ['caFile: /etc/ca.crt', 'MIIBpublicCertificateBody', '-----END RSA PRIVATE KEY-----'],
  );
});

test('JSON secrets are redacted and the document stays valid JSON', () => {
  const doc = {
    auths: { 'registry.example.com': { auth: 'ZG9ja2VyOnB3', email: 'ops@example.com' } },
    password: 'json-pw',
    user: 'bob',
    nested: { apiKey: 'k-123456' },
  };
  const text = check(JSON.stringify(doc, null, 2), ['ZG9ja2VyOnB3', 'json-pw', 'k-123456'], ['ops@example.com', 'bob']);
  const back = JSON.parse(text) as typeof doc;
  assert.equal(back.password, REDACTED);
  assert.equal(back.auths['registry.example.com'].auth, REDACTED);
  const compact = redactText(JSON.stringify(doc)).text;
  assert.equal((JSON.parse(compact) as typeof doc).nested.apiKey, REDACTED);
});

test('configuration that only names security settings is left as it is', () => {
  const kubelet = [
    'authentication:',
    '  anonymous:',
    '    enabled: false',
    '  webhook:',
    '    cacheTTL: 2m0s',
    'authorization:',
    '  mode: Webhook',
    'serverTLSBootstrap: true',
    'tokenTTL: 1h',
    'key: node.kubernetes.io/not-ready',
    'tlsPrivateKeyFile: /var/lib/kubelet/pki/kubelet.key',
    'net.ipv4.tcp_syncookies = 1',
  ].join('\n');
  const r = redactText(kubelet);
  assert.equal(r.text, kubelet);
  assert.equal(r.count, 0);
});

test('secret key names are recognised across naming styles, and ordinary names are not', () => {
  for (const k of [
    'password',
    'DB_PASSWORD',
    'clientSecret',
    'client-secret',
    'bootstrapToken',
    'identitytoken',
    'AWS_SECRET_ACCESS_KEY',
    'apiKey',
    'auth',
    'client-key-data',
  ])
    assert.ok(isSecretKey(k), k);
  for (const k of [
    'authentication',
    'authorization-mode',
    'tokenTTL',
    'username',
    'secretName',
    'key',
    'keyFile',
    'name',
    'tlsPrivateKeyFile',
  ])
    assert.ok(!isSecretKey(k), k);
});
