/**
 * Where the agent may PUT a bundle (issue #22, point 1). The agent runs on the host network, so an
 * upload URL is a request the node itself makes: to its loopback services, the cloud metadata
 * endpoint, the VPC or the API server. A destination is therefore https (unless allowed), its name
 * is resolved once, every address it resolves to must be public (unless the host is allowed), and
 * the connection goes to a checked address only: the request's `lookup` answers the checked
 * addresses, so a second DNS answer (rebinding) is never asked for. TLS SNI and Host stay the name.
 */
import dns from 'node:dns';
import net from 'node:net';
import { VigilError } from '../../util/errors.ts';

export interface DestinationPolicy {
  /** Host names or IP addresses (exact, case-insensitive) exempt from the address checks. */
  allowedHosts: readonly string[];
  /** Allow http:// URLs (https only otherwise). */
  allowHttp: boolean;
  /** The API server's URL: its own addresses are refused too (a public endpoint is still the cluster's). */
  apiServer?: string;
}

export interface ResolvedAddress {
  address: string;
  family: 4 | 6;
}

/** One DNS question: every address of a name. Injected by tests (a rebinding resolver). */
export type Resolver = (host: string) => Promise<ResolvedAddress[]>;

export const systemResolver: Resolver = async (host) =>
  (await dns.promises.lookup(host, { all: true, verbatim: true })).map((a) => ({ address: a.address, family: a.family === 6 ? 6 : 4 }));

/** A destination refused by policy: nothing was sent. Its message names no URL, only why. */
export class DestinationRefused extends VigilError {
  constructor(message: string) {
    super('VIGIL_E_UPLOAD_DESTINATION_REFUSED', message);
  }
}

export interface CheckedDestination {
  url: URL;
  addresses: ResolvedAddress[];
  /** For http(s).request: answers only the checked addresses, whatever name it is asked for. */
  lookup: net.LookupFunction;
}

const RANGES: [string, number, 'ipv4' | 'ipv6', string][] = [
  ['0.0.0.0', 8, 'ipv4', 'an unspecified'],
  ['10.0.0.0', 8, 'ipv4', 'a private'],
  ['100.64.0.0', 10, 'ipv4', 'a shared (carrier-grade NAT)'],
  ['127.0.0.0', 8, 'ipv4', 'a loopback'],
  ['169.254.0.0', 16, 'ipv4', 'a link-local'],
  ['172.16.0.0', 12, 'ipv4', 'a private'],
  ['192.0.0.0', 24, 'ipv4', 'a reserved'],
  ['192.168.0.0', 16, 'ipv4', 'a private'],
  ['198.18.0.0', 15, 'ipv4', 'a benchmarking'],
  ['224.0.0.0', 4, 'ipv4', 'a multicast'],
  ['240.0.0.0', 4, 'ipv4', 'a reserved'],
  ['::', 128, 'ipv6', 'an unspecified'],
  ['::1', 128, 'ipv6', 'a loopback'],
  ['fc00::', 7, 'ipv6', 'a unique-local'],
  ['fe80::', 10, 'ipv6', 'a link-local'],
  ['fec0::', 10, 'ipv6', 'a site-local'],
  ['ff00::', 8, 'ipv6', 'a multicast'],
];
const LISTS = RANGES.map(([a, p, t, kind]) => {
  const l = new net.BlockList();
  l.addSubnet(a, p, t);
  return { l, kind };
});

/** Why an address may not be uploaded to ("a loopback"...), or undefined for a public one. */
export function refusedKind(ip: string): string | undefined {
  const type = net.isIPv4(ip) ? 'ipv4' : net.isIPv6(ip) ? 'ipv6' : undefined;
  if (!type) return 'an unparsable';
  // BlockList matches IPv4-mapped IPv6 (::ffff:a.b.c.d) against IPv4 ranges itself; NAT64 it does not.
  const v4 = type === 'ipv6' ? nat64(ip) : undefined;
  if (v4) return refusedKind(v4);
  return LISTS.find((x) => x.l.check(ip, type))?.kind;
}

/** The IPv4 address in a NAT64 well-known-prefix address (64:ff9b::/96), if it is one. */
function nat64(ip: string): string | undefined {
  const groups = expand(ip);
  if (!groups || groups[0] !== 0x64 || groups[1] !== 0xff9b || groups.slice(2, 6).some((g) => g !== 0)) return undefined;
  return [groups[6] >> 8, groups[6] & 255, groups[7] >> 8, groups[7] & 255].join('.');
}

function expand(ip: string): number[] | undefined {
  let text = ip.toLowerCase();
  const dotted = /(\d+\.\d+\.\d+\.\d+)$/.exec(text);
  if (dotted) {
    const b = dotted[1].split('.').map(Number);
    text = text.slice(0, -dotted[1].length) + `${((b[0] << 8) | b[1]).toString(16)}:${((b[2] << 8) | b[3]).toString(16)}`;
  }
  const [head, tail] = text.split('::');
  const h = head ? head.split(':') : [];
  const t = tail ? tail.split(':') : [];
  const fill = text.includes('::') ? 8 - h.length - t.length : 0;
  const all = [...h, ...Array<string>(fill).fill('0'), ...t].map((g) => parseInt(g, 16));
  return all.length === 8 && all.every((g) => g >= 0 && g <= 0xffff) ? all : undefined;
}

function bare(host: string): string {
  return host.replace(/^\[|\]$/g, '').toLowerCase();
}

/**
 * Checks an upload URL against the policy and resolves it once. Throws DestinationRefused (nothing
 * sent) when the scheme, an address, or the API server's own address is not allowed.
 */
export async function checkDestination(
  text: string,
  policy: DestinationPolicy,
  resolve: Resolver = systemResolver,
): Promise<CheckedDestination> {
  let url: URL;
  try {
    url = new URL(text);
  } catch {
    throw new DestinationRefused('the upload destination is not a URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:') throw new DestinationRefused(`${url.protocol} URLs are not supported (https)`);
  if (url.protocol === 'http:' && !policy.allowHttp) {
    throw new DestinationRefused('the upload destination is http:// and only https is allowed (diagnostics.upload.allowHttp)');
  }
  const host = bare(url.hostname);
  const allowed = policy.allowedHosts.some((h) => bare(h) === host);
  let addresses: ResolvedAddress[];
  if (net.isIP(host)) addresses = [{ address: host, family: net.isIPv6(host) ? 6 : 4 }];
  else {
    try {
      addresses = (await resolve(host)).filter((a) => net.isIP(a.address));
    } catch (err) {
      throw new DestinationRefused(`the upload destination's name does not resolve (${(err as { code?: string }).code ?? 'no answer'})`);
    }
    if (!addresses.length) throw new DestinationRefused("the upload destination's name has no address");
  }
  if (!allowed) {
    const hatch = ' (diagnostics.upload.allowedHosts lists hosts allowed anyway)';
    for (const a of addresses) {
      const kind = refusedKind(a.address);
      if (kind) throw new DestinationRefused(`the upload destination is ${kind} address${hatch}`);
    }
    if (policy.apiServer && (await isApiServer(host, addresses, policy.apiServer, resolve))) {
      throw new DestinationRefused(`the upload destination is the API server${hatch}`);
    }
  }
  const pinned = addresses.map((a) => ({ ...a }));
  const lookup = ((_name: string, options: dns.LookupOptions, cb: (...args: unknown[]) => void) => {
    const fit = pinned.filter((a) => !options.family || options.family === a.family);
    const list = fit.length ? fit : pinned;
    if (options.all) cb(null, list);
    else cb(null, list[0].address, list[0].family);
  }) as unknown as net.LookupFunction;
  return { url, addresses: pinned, lookup };
}

async function isApiServer(host: string, addresses: ResolvedAddress[], apiServer: string, resolve: Resolver): Promise<boolean> {
  let api: string;
  try {
    api = bare(new URL(apiServer).hostname);
  } catch {
    return false;
  }
  if (api === host) return true;
  let apiAddresses: string[];
  try {
    apiAddresses = net.isIP(api) ? [api] : (await resolve(api)).map((a) => a.address);
  } catch {
    return false;
  }
  const norm = (ip: string) => (expand(ip) ?? [ip]).join(':');
  return addresses.some((a) =>
    apiAddresses.some((b) => a.address === b || (net.isIPv6(a.address) && net.isIPv6(b) && norm(a.address) === norm(b))),
  );
}
