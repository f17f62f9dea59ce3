import type { HandshakeFailure } from '../errors.js';
import { redactUrl } from './url.js';

/** The user and virtual host a URL asks for, as the broker reads them. */
function userAndVhost(url: string): { user: string; vhost: string; port: string } {
  try {
    const u = new URL(url);
    const path = u.pathname.length > 1 ? decodeURIComponent(u.pathname.slice(1)) : '/';
    return { user: decodeURIComponent(u.username) || 'guest', vhost: path, port: u.port || (u.protocol === 'amqps:' ? '5671' : '5672') };
  } catch {
    return { user: 'guest', vhost: '/', port: '5672' };
  }
}

/**
 * Reads an amqplib connect error that no retry can fix: refused credentials, a virtual
 * host the broker closed the connection over, or a server that does not speak AMQP.
 * Returns the reason and one message saying what is wrong and what to check, or
 * `undefined` for any other error (refused, timed out, reset: worth trying again).
 * `setting` names where the URL came from, e.g. `--url (or WARREN_AMQP_URL)`.
 */
export function diagnoseHandshake(error: unknown, url: string, setting = 'the URL'): { reason: HandshakeFailure; message: string } | undefined {
  const text = error instanceof Error ? error.message : String(error);
  const where = redactUrl(url);
  const { user, vhost, port } = userAndVhost(url);
  if (/Handshake terminated by server: 403|ACCESS.REFUSED - Login was refused/.test(text)) {
    return {
      reason: 'credentials',
      message: `RabbitMQ at ${where} refused the credentials of user '${user}' (ACCESS_REFUSED). Check the user name and password in ${setting}; the user must exist on this broker (rabbitmqctl list_users), and 'guest' may log in only from localhost.`,
    };
  }
  // The broker closes the connection in answer to connection.open when the vhost does not
  // exist or the user has no permission on it; amqplib drops the broker's reply text.
  if (/Expected ConnectionOpenOk; got <ConnectionClose|NOT_ALLOWED - .*vhost/.test(text)) {
    return {
      reason: 'vhost',
      message: `RabbitMQ at ${where} accepted user '${user}' but refused virtual host '${vhost}': it does not exist, or the user has no access to it. Check the vhost in ${setting} (the path after the port: none or %2F is '/'; list them with rabbitmqctl list_vhosts) and that '${user}' has permissions on it (rabbitmqctl list_permissions -p '${vhost}').`,
    };
  }
  if (/Frame size \d+ exceeds|Expected ConnectionStart|Unexpected frame|Invalid frame|Frame on channel|connection\.secure, connection\.close, or connection\.tune|Unknown frame/i.test(text)) {
    return {
      reason: 'not-amqp',
      message: `The server at ${where} does not speak AMQP (${text.split('\n')[0]}). Check that port ${port} in ${setting} is RabbitMQ's AMQP port (5672 by default, 5671 for amqps://); 15672 is the management API's HTTP port.`,
    };
  }
  return undefined;
}
