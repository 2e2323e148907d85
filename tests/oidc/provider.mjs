// A real, certified OpenID provider for the admin single sign-on end-to-end test
// (tests/python/test_admin_oidc.py): panva/node-oidc-provider v8, in memory, nothing mocked.
//
//   node provider.mjs --port 9400 --control-port 9401 --redirect-uri URI \
//     [--post-logout-redirect-uri URI] [--client-secret SECRET]
//
// (or OIDC_PORT, OIDC_CONTROL_PORT, OIDC_REDIRECT_URI, OIDC_POST_LOGOUT_REDIRECT_URI,
// OIDC_CLIENT_SECRET). The issuer is http://127.0.0.1:<port>; one confidential client,
// `ferrogate-admin` (client_secret_basic, PKCE S256 required). devInteractions: any password;
// the login is the account id. Groups by login: kate -> gw-keys, olga -> gw-owners,
// nobody -> other, anyone else -> none. Signing keys: a fresh RS256 key at start.
//
// The control port (loopback, for the test only):
//   POST /rotate  a new RS256 key goes first in the JWKS and signs from now on; the old ones
//                 stay published. oidc-provider reads `jwks` at construction, so this builds a
//                 new Provider and swaps the request handler; the in-memory adapter (module
//                 state) and the cookie keys are shared, so sessions and grants survive.
//   POST /tamper  the next token answer's ID token gets a forged payload (groups: gw-owners)
//                 under the provider's real signature, as a token-endpoint MITM would.
//   GET  /keys    the kids published, the signing one first.
// Prints one line `ready <issuer>` on stdout when both ports listen.

import { generateKeyPairSync, randomBytes, randomUUID } from 'node:crypto';
import { createServer } from 'node:http';
import { parseArgs } from 'node:util';

import Provider from 'oidc-provider';

const { values: args } = parseArgs({
  options: {
    port: { type: 'string', default: process.env.OIDC_PORT },
    'control-port': { type: 'string', default: process.env.OIDC_CONTROL_PORT },
    'redirect-uri': { type: 'string', default: process.env.OIDC_REDIRECT_URI },
    'post-logout-redirect-uri': { type: 'string', default: process.env.OIDC_POST_LOGOUT_REDIRECT_URI },
    'client-secret': { type: 'string', default: process.env.OIDC_CLIENT_SECRET ?? 'test-secret' },
  },
});
for (const name of ['port', 'control-port', 'redirect-uri']) {
  if (!args[name]) {
    console.error(`provider.mjs: --${name} is required`);
    process.exit(2);
  }
}

const issuer = `http://127.0.0.1:${args.port}`;
const GROUPS = { kate: ['gw-keys'], olga: ['gw-owners'], nobody: ['other'] };
const cookieKeys = [randomBytes(32).toString('base64url')];

function newKey() {
  const { privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { ...privateKey.export({ format: 'jwk' }), kid: randomUUID(), alg: 'RS256', use: 'sig' };
}

async function findAccount(_ctx, id) {
  return {
    accountId: id,
    claims: async () => ({
      sub: id,
      email: `${id}@example.test`,
      email_verified: true,
      preferred_username: id,
      groups: GROUPS[id] ?? [],
    }),
  };
}

function configuration(keys) {
  return {
    clients: [{
      client_id: 'ferrogate-admin',
      client_secret: args['client-secret'],
      redirect_uris: [args['redirect-uri']],
      post_logout_redirect_uris: args['post-logout-redirect-uri'] ? [args['post-logout-redirect-uri']] : [],
      grant_types: ['authorization_code'],
      response_types: ['code'],
      token_endpoint_auth_method: 'client_secret_basic',
    }],
    pkce: { methods: ['S256'], required: () => true },
    claims: {
      openid: ['sub'],
      email: ['email', 'email_verified'],
      profile: ['preferred_username'],
      groups: ['groups'],
    },
    conformIdTokenClaims: false,
    findAccount,
    jwks: { keys },
    cookies: { keys: cookieKeys },
    features: { devInteractions: { enabled: true }, rpInitiatedLogout: { enabled: true } },
  };
}

let tamperNext = false;

/** The ID token with its payload replaced (groups: gw-owners), header and signature kept. */
function forge(idToken) {
  const [header, payload, signature] = idToken.split('.');
  const claims = JSON.parse(Buffer.from(payload, 'base64url').toString());
  claims.groups = ['gw-owners'];
  return `${header}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}.${signature}`;
}

function build(keys) {
  const provider = new Provider(issuer, configuration(keys));
  provider.use(async (ctx, next) => {
    await next();
    if (tamperNext && ctx.path === '/token' && ctx.body && typeof ctx.body.id_token === 'string') {
      tamperNext = false;
      ctx.body = { ...ctx.body, id_token: forge(ctx.body.id_token) };
    }
  });
  provider.on('server_error', (_ctx, err) => console.error('server_error', err));
  return provider.callback();
}

let keys = [newKey()];
let handler = build(keys);

const op = createServer((req, res) => handler(req, res));
const control = createServer((req, res) => {
  const answer = (status, body) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };
  if (req.method === 'POST' && req.url === '/rotate') {
    keys = [newKey(), ...keys];
    handler = build(keys);
    console.log(`rotated: ${keys[0].kid} signs`);
    return answer(200, { kid: keys[0].kid, kids: keys.map((k) => k.kid) });
  }
  if (req.method === 'POST' && req.url === '/tamper') {
    tamperNext = true;
    return answer(200, { tamper: 'next token answer' });
  }
  if (req.method === 'GET' && req.url === '/keys') {
    return answer(200, { kids: keys.map((k) => k.kid) });
  }
  return answer(404, { error: 'POST /rotate, POST /tamper or GET /keys' });
});

let listening = 0;
const ready = () => {
  listening += 1;
  if (listening === 2) console.log(`ready ${issuer}`);
};
op.listen(Number(args.port), '127.0.0.1', ready);
control.listen(Number(args['control-port']), '127.0.0.1', ready);
for (const signal of ['SIGTERM', 'SIGINT']) {
  process.on(signal, () => process.exit(0));
}
