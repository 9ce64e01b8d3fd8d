/**
 * network: interfaces, addresses, routes, policy rules, neighbours, conntrack counts and the
 * packet filter (iptables and nftables), through `ip` and friends when installed and from /proc
 * and /sys otherwise.
 */
import { listDir, readFileSmall } from '../../sources/host/index.ts';
import { commandCollector, filesCollector, readFiles } from './common.ts';
import type { Collector, CollectorContext } from './types.ts';

const LINK_ATTRS = ['address', 'operstate', 'carrier', 'mtu', 'speed', 'duplex', 'type', 'flags', 'ifindex'];

/** `ip link` without `ip`: each interface's sysfs attributes and counters. */
function linksFromSys(ctx: CollectorContext): string {
  const out: string[] = [];
  for (const dev of listDir(ctx.capture.hostRoot, '/sys/class/net').sort()) {
    const attrs = LINK_ATTRS.map((a) => `${a}=${readFileSmall(ctx.host(`/sys/class/net/${dev}/${a}`))?.trim() ?? '?'}`);
    out.push(`${dev}: ${attrs.join(' ')}`);
  }
  return `${out.join('\n')}\n\n${readFiles(ctx, ['/proc/net/dev']).text}`;
}

const fallback = (paths: string[]) => (ctx: CollectorContext) => {
  const r = readFiles(ctx, paths);
  return r.found ? r.text : undefined;
};

export function networkCollectors(): Collector[] {
  return [
    commandCollector('network/links', 'network', 'network/links.txt', [['ip', '-d', '-s', 'link', 'show']], linksFromSys),
    commandCollector(
      'network/addresses',
      'network',
      'network/addresses.txt',
      [['ip', '-d', 'address', 'show']],
      fallback(['/proc/net/fib_trie', '/proc/net/if_inet6']),
    ),
    commandCollector(
      'network/routes',
      'network',
      'network/routes.txt',
      [
        ['ip', '-4', 'route', 'show', 'table', 'all'],
        ['ip', '-6', 'route', 'show', 'table', 'all'],
      ],
      fallback(['/proc/net/route', '/proc/net/ipv6_route']),
    ),
    commandCollector('network/rules', 'network', 'network/rules.txt', [
      ['ip', '-4', 'rule', 'show'],
      ['ip', '-6', 'rule', 'show'],
    ]),
    commandCollector('network/neighbours', 'network', 'network/neighbours.txt', [['ip', 'neigh', 'show']], fallback(['/proc/net/arp'])),
    filesCollector('network/conntrack', 'network', 'network/conntrack.txt', [
      '/proc/sys/net/netfilter/nf_conntrack_count',
      '/proc/sys/net/netfilter/nf_conntrack_max',
      '/proc/sys/net/netfilter/nf_conntrack_buckets',
      '/proc/net/stat/nf_conntrack',
    ]),
    commandCollector('network/conntrack-stats', 'network', 'network/conntrack-stats.txt', [['conntrack', '-S']]),
    commandCollector('network/iptables', 'network', 'network/iptables.txt', [
      ['iptables-save', '-c'],
      ['ip6tables-save', '-c'],
    ]),
    commandCollector('network/nftables', 'network', 'network/nftables.txt', [['nft', 'list', 'ruleset']]),
    filesCollector('network/proc-net', 'network', 'network/proc-net.txt', [
      '/proc/net/dev',
      '/proc/net/snmp',
      '/proc/net/netstat',
      '/proc/net/sockstat',
      '/proc/net/softnet_stat',
    ]),
    filesCollector('network/resolv', 'network', 'network/resolv.conf', ['/etc/resolv.conf']),
  ];
}
