/** The HTTP listen address, `HOST:PORT`: one parser for the config key and the `--listen` flag. */

export interface ListenAddress {
  /** Empty: every interface. */
  host: string;
  port: number;
}

export const LISTEN_FORMAT = 'expected HOST:PORT with a port from 0 to 65535, e.g. 127.0.0.1:9464 or :9464 (every interface)';

/** The host and port of `text`, or undefined when it is not HOST:PORT with a port in 0-65535. */
export function parseListen(text: string): ListenAddress | undefined {
  const m = /^([A-Za-z0-9.-]*):(\d{1,5})$/.exec(text);
  if (!m) return undefined;
  const port = Number(m[2]);
  return port <= 65_535 ? { host: m[1], port } : undefined;
}
