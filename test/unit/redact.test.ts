import assert from 'node:assert/strict';
import { test } from 'node:test';
import { REDACTED, isSecretKey, redactText } from '../../src/diagnostics/index.ts';

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

test('a log line of thousands of nested pairs ("a:a:a:...") is redacted past 8 levels, not a stack overflow; nearer pairs are still read', () => {
  // 'a:'.repeat(8192) threw RangeError (the nested-pair reader recursed once per pair) and failed the whole capture.
  const deep = redactText(`msg=${'a:'.repeat(8192)}password=hidden-deep`);
  assert.ok(!deep.text.includes('hidden-deep'));
  assert.equal(deep.count, 1);
  check('KUBELET_EXTRA_ARGS=--node-labels=a=b,c=d --registry-password=nested-secret-1', ['nested-secret-1'], ['--node-labels=a=b']);
  check(`x=${'k:'.repeat(6)}token=six-deep-secret`, ['six-deep-secret'], ['x=k:k:']);
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

/**
 * Secret shapes from the tools found on a node (issue #22 point 9): [where it is seen, the text,
 * the secret, what must stay]. Each secret is unique so that a partial leak is caught too.
 */
const SHAPES: [string, string, string, string[]][] = [
  // kubelet and kubeadm
  [
    '/etc/default/kubelet',
    'KUBELET_EXTRA_ARGS=--registry-password=S1kubelet --node-labels=gpu=true',
    'S1kubelet',
    ['--node-labels=gpu=true'],
  ],
  ['kubelet env quoted', 'KUBELET_EXTRA_ARGS="--registry-password=S2quoted --v=2"', 'S2quoted', ['--v=2']],
  [
    'kubeadm join',
    'kubeadm join 10.0.0.1:6443 --token abcdef.0123456789abcdef --discovery-token-ca-cert-hash sha256:1234',
    'abcdef.0123456789abcdef',
    ['--discovery-token-ca-cert-hash sha256:1234'],
  ],
  ['kubeadm certificate key', 'kubeadm join --control-plane --certificate-key S4certkeyhex', 'S4certkeyhex', ['--control-plane']],
  ['bootstrap kubeconfig', '    token: 07401b.f395accd246ae52d', '07401b.f395accd246ae52d', ['token:']],
  ['kubectl literal', 'kubectl create secret generic db --from-literal=password=S6literal', 'S6literal', ['create secret generic db']],
  [
    'kubectl docker-registry',
    'kubectl create secret docker-registry r --docker-username=u --docker-password=S7dockerpw',
    'S7dockerpw',
    ['--docker-username=u'],
  ],
  ['helm --set', 'helm install db bitnami/postgresql --set auth.postgresPassword=S8helmset', 'S8helmset', ['bitnami/postgresql']],
  // container registries
  ['docker login -p', 'docker login -u robot -p S9dockerp registry.example.com', 'S9dockerp', ['-u robot', 'registry.example.com']],
  ['docker login -pX', 'docker login -uuser -pS10attached nvcr.io', 'S10attached', ['nvcr.io']],
  ['podman login --password', 'podman login --username u --password S11podman quay.io', 'S11podman', ['quay.io']],
  ['nerdctl login', '/usr/local/bin/nerdctl login -u $oauthtoken -p S12nerdctl nvcr.io', 'S12nerdctl', ['nvcr.io']],
  ['crane auth login', 'crane auth login ghcr.io -u me -p S13crane', 'S13crane', ['ghcr.io']],
  ['helm registry login', 'helm registry login registry.example.com --username u -p S14helm', 'S14helm', ['registry.example.com']],
  ['skopeo creds', 'skopeo copy --src-creds robot:S15skopeo docker://a/b docker://c/d', 'S15skopeo', ['docker://a/b']],
  ['crictl creds', 'crictl pull --creds robot:S16crictl registry.example.com/img:1', 'S16crictl', ['registry.example.com/img:1']],
  ['ctr -u', 'ctr -n k8s.io images pull -u robot:S17ctr registry.example.com/img:1', 'S17ctr', ['robot:', 'registry.example.com/img:1']],
  ['docker config.json', '{"auths":{"nvcr.io":{"auth":"JG9hdXRodG9rZW46UzE4"}}}', 'JG9hdXRodG9rZW46UzE4', ['nvcr.io']],
  ['NGC key', 'NGC_CLI_API_KEY=nvapi-S19ngcKeyAAAAAAAAAAAAAAAA', 'nvapi-S19ngcKeyAAAAAAAAAAAAAAAA', ['NGC_CLI_API_KEY=']],
  [
    'Docker Hub PAT',
    'echo dckr_pat_S20hubTokenAAAAAAAAAAAA | docker login --password-stdin',
    'dckr_pat_S20hubTokenAAAAAAAAAAAA',
    ['--password-stdin'],
  ],
  // database clients
  ['mysql -pS', '/usr/bin/mysql -u root -pS21mysql -h db.internal app', 'S21mysql', ['-u root', '-h db.internal app']],
  ['mysqldump -pS', 'mysqldump --single-transaction -uroot -pS22dump app', 'S22dump', ['--single-transaction']],
  ['mariadb --password=', 'mariadb --password=S23maria -P 3306', 'S23maria', ['-P 3306']],
  ['MYSQL_PWD', 'MYSQL_PWD=S24mysqlpwd', 'S24mysqlpwd', ['MYSQL_PWD=']],
  ['psql URL', 'psql postgresql://app:S25pgurl@db:5432/app', 'S25pgurl', ['db:5432/app']],
  ['psql conninfo', 'psql "host=db port=5432 user=app password=S26conninfo"', 'S26conninfo', ['port=5432']],
  ['PGPASSWORD', 'PGPASSWORD=S27pgpass', 'S27pgpass', ['PGPASSWORD=']],
  ['redis-cli -a', 'redis-cli -h cache -p 6379 -a S28redis ping', 'S28redis', ['-p 6379', 'ping']],
  ['redis URL without user', 'redis-cli -u redis://:S29redisurl@cache:6379/0', 'S29redisurl', ['cache:6379/0']],
  ['redis.conf', 'requirepass S30requirepass', 'S30requirepass', ['requirepass']],
  ['REDISCLI_AUTH', 'REDISCLI_AUTH=S31rediscli', 'S31rediscli', ['REDISCLI_AUTH=']],
  ['mongosh -p', 'mongosh --host db -u admin -p S32mongo', 'S32mongo', ['--host db']],
  ['mongodb URL', 'mongodb://admin:S33mongourl@db:27017/?authSource=admin', 'S33mongourl', ['db:27017']],
  // curl, wget and other clients
  ['curl -u', 'curl -sSf -u admin:S34curl https://grafana.local/api', 'S34curl', ['admin:', 'https://grafana.local/api']],
  ['curl --user=', 'curl --user=admin:S35curlUser https://x.local', 'S35curlUser', ['https://x.local']],
  [
    'curl -H private token',
    'curl -H "PRIVATE-TOKEN: S36gitlabHeader" https://gitlab.local/api/v4',
    'S36gitlabHeader',
    ['https://gitlab.local/api/v4'],
  ],
  ['wget --http-password', 'wget --http-user=u --http-password=S37wget https://x.local/f', 'S37wget', ['--http-user=u']],
  [
    'etcdctl --user',
    'etcdctl --endpoints=https://127.0.0.1:2379 --user root:S38etcd get /',
    'S38etcd',
    ['--endpoints=https://127.0.0.1:2379'],
  ],
  ['sshpass', 'sshpass -p S39sshpass ssh -p 2222 admin@bmc', 'S39sshpass', ['ssh -p 2222 admin@bmc']],
  ['ipmitool', 'ipmitool -I lanplus -H 10.1.1.1 -U admin -P S40ipmi sel list', 'S40ipmi', ['-H 10.1.1.1', 'sel list']],
  ['ldapsearch -w', 'ldapsearch -x -D cn=admin,dc=ex -w S41ldap -b dc=ex', 'S41ldap', ['-b dc=ex']],
  ['smbclient -U user%pw', 'smbclient //fs/share -U svc%S42smb', 'S42smb', ['//fs/share']],
  ['netrc', 'machine registry.example.com login robot password S43netrc', 'S43netrc', ['machine registry.example.com login robot']],
  ['netrc multi-line', '  password S44netrcLine', 'S44netrcLine', []],
  ['openssl -passin', 'openssl pkcs12 -in a.p12 -passin pass:S45openssl -nodes', 'S45openssl', ['-nodes']],
  ['keytool', 'keytool -list -keystore ks.jks -storepass S46keytool', 'S46keytool', ['-keystore ks.jks']],
  ['java system property', 'java -Djavax.net.ssl.keyStorePassword=S47jvm -jar app.jar', 'S47jvm', ['-jar app.jar']],
  ['htpasswd -b', 'htpasswd -bc /etc/nginx/.htpasswd admin S48htpasswd', 'S48htpasswd', ['/etc/nginx/.htpasswd admin']],
  ['rabbitmqctl', 'rabbitmqctl add_user svc S49rabbit', 'S49rabbit', ['add_user svc']],
  // cloud CLIs and environment files
  ['aws configure set', 'aws configure set aws_secret_access_key S50awsSecret --profile prod', 'S50awsSecret', ['--profile prod']],
  ['AWS env', 'AWS_SESSION_TOKEN=S51session', 'S51session', ['AWS_SESSION_TOKEN=']],
  ['az login -p', 'az login --service-principal -u app-id -p S52azure --tenant t1', 'S52azure', ['--tenant t1']],
  [
    'Azure connection string',
    'DefaultEndpointsProtocol=https;AccountName=acct;AccountKey=S53azureKey==;EndpointSuffix=core.windows.net',
    'S53azureKey',
    ['AccountName=acct', 'EndpointSuffix=core.windows.net'],
  ],
  ['Azure client secret env', 'AZURE_CLIENT_SECRET=S54azSecret', 'S54azSecret', ['AZURE_CLIENT_SECRET=']],
  [
    'GCP service account JSON',
    '  "private_key": "-----BEGIN PRIVATE KEY-----\\nS55gcp\\n-----END PRIVATE KEY-----\\n",',
    'S55gcp',
    ['"private_key"'],
  ],
  ['Google API key', 'key=AIzaS56googleAAAAAAAAAAAAAAAAAAAAAAAAAAA', 'AIzaS56googleAAAAAAAAAAAAAAAAAAAAAAAAAAA', []],
  ['doctl -t', 'doctl auth init -t S57doctl', 'S57doctl', ['auth init']],
  ['vault login', 'vault login S58vault', 'S58vault', ['vault login']],
  ['VAULT_TOKEN', 'export VAULT_TOKEN=S59vaultenv', 'S59vaultenv', ['export VAULT_TOKEN=']],
  ['minio mc', 'mc alias set minio https://minio.local:9000 AKMINIO S60minio', 'S60minio', ['https://minio.local:9000 AKMINIO']],
  [
    'Hugging Face',
    'fetching with token hf_S61huggingfaceAAAAAAAAAAAAAAAAAAAAAA for meta-llama',
    'hf_S61huggingfaceAAAAAAAAAAAAAAAAAAAAAA',
    ['for meta-llama'],
  ],
  ['wandb login', 'wandb login S62wandb', 'S62wandb', ['wandb login']],
  ['.npmrc', '//registry.npmjs.org/:_authToken=S63npm', 'S63npm', ['//registry.npmjs.org/']],
  ['pip.conf', 'index-url = https://pypi:S64pip@pypi.internal/simple', 'S64pip', ['pypi.internal/simple']],
  ['Slack webhook', 'ALERT_URL=https://hooks.slack.com/services/T00/B00/S65slackhook', 'S65slackhook', ['ALERT_URL=']],
  ['systemd Environment=', 'Environment="HTTPS_PROXY=http://proxy:S66proxy@10.0.0.9:3128"', 'S66proxy', ['10.0.0.9:3128']],
  ['docker run -e', 'docker run -e POSTGRES_PASSWORD=S67dockerenv -p 5432:5432 postgres', 'S67dockerenv', ['-p 5432:5432 postgres']],
];

test(`${SHAPES.length} secret shapes from node tools, registries, database clients, curl, cloud CLIs and env files are redacted, and what is around them stays`, () => {
  assert.ok(SHAPES.length >= 40);
  for (const [where, input, secret, kept] of SHAPES) {
    const { text, count } = redactText(input);
    assert.ok(!text.includes(secret), `${where}: ${JSON.stringify(secret)} survived in ${JSON.stringify(text)}`);
    assert.ok(count >= 1 && text.includes(REDACTED), `${where}: counted and marked`);
    for (const k of kept) assert.ok(text.includes(k), `${where}: ${JSON.stringify(k)} was lost from ${JSON.stringify(text)}`);
  }
});

test('flags that are ports or options for other programs are evidence and stay as they are', () => {
  for (const line of [
    'ssh -p 2222 admin@10.0.0.5',
    'scp -P 2222 a.log host:/tmp',
    'redis-cli -h cache -p 6379 info',
    'psql -h db -p 5432 -U app',
    'mysql -P 3306 -h db -u app -p app_db',
    'docker run -p 8080:80 nginx',
    'kubectl port-forward svc/x 8080:80',
    'iptables -A INPUT -p tcp --dport 22 -j ACCEPT',
    'mkdir -p /var/lib/kubelet',
    'curl -u admin https://x.local',
    'nvidia-smi -q -d PERFORMANCE',
    'kube-apiserver --service-account-key-file=/etc/kubernetes/pki/sa.pub',
    'containerd.service: Consumed 1h 2min 3.456s CPU time.',
    'systemd[1]: Started kubelet.service - kubelet: The Kubernetes Node Agent.',
  ]) {
    const r = redactText(line);
    assert.equal(r.text, line, line);
    assert.equal(r.count, 0, line);
  }
});
