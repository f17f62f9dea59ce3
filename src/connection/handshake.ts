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
  const tls = diagnoseTls(error, where, port, setting);
  if (tls) return { reason: 'tls', message: tls };
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

/** Node's codes for a server certificate that does not chain to a trusted CA, or is out of date. */
const UNTRUSTED = new Set([
  'SELF_SIGNED_CERT_IN_CHAIN',
  'DEPTH_ZERO_SELF_SIGNED_CERT',
  'UNABLE_TO_VERIFY_LEAF_SIGNATURE',
  'UNABLE_TO_GET_ISSUER_CERT',
  'UNABLE_TO_GET_ISSUER_CERT_LOCALLY',
  'CERT_UNTRUSTED',
  'CERT_SIGNATURE_FAILURE',
  'CERT_HAS_EXPIRED',
  'CERT_NOT_YET_VALID',
]);

/**
 * A TLS failure no retry can fix, as one message naming the cause and what to set; or
 * `undefined`. The broker's certificate is checked by this process (Node's codes); the
 * broker's refusal of this client's certificate arrives as a TLS alert.
 */
function diagnoseTls(error: unknown, where: string, port: string, setting: string): string | undefined {
  const code = (error as { code?: unknown } | undefined)?.code;
  const raw = error instanceof Error ? error.message : String(error);
  // OpenSSL's text ("80AC...:error:0A00045C:SSL routines:ssl3_read_bytes:tlsv13 alert
  // certificate required:../deps/...") shortened to its reason.
  const text = /:SSL routines:[^:]*:([^:]+):/.exec(raw)?.[1] ?? raw.split('\n')[0]!;
  if (typeof code === 'string' && UNTRUSTED.has(code)) {
    return `RabbitMQ at ${where} presented a TLS certificate that failed certificate verification (${code}: ${text}). Give the CA that signed the broker's certificate as tls.ca (its PEM text, e.g. readFileSync('ca.pem')); without tls.ca only Node's public CAs are trusted. Do not turn tls.rejectUnauthorized off: anyone on the path could then read the password and the messages.`;
  }
  if (code === 'ERR_TLS_CERT_ALTNAME_INVALID') {
    return `RabbitMQ at ${where} presented a TLS certificate for another name: certificate verification failed (${text}). Connect with a host name the certificate carries, or set tls.servername to one of its names.`;
  }
  if (/alert certificate required|ALERT_CERTIFICATE_REQUIRED|peer did not return a certificate/i.test(`${String(code)} ${raw}`)) {
    return `RabbitMQ at ${where} requires a client certificate and none was given (${text}). Set tls.cert and tls.key (PEM text) to a certificate signed by a CA the broker trusts (its ssl_options.cacertfile).`;
  }
  if (/ALERT_UNKNOWN_CA|alert unknown ca|ALERT_BAD_CERTIFICATE|alert bad certificate|ALERT_CERTIFICATE_UNKNOWN/i.test(`${String(code)} ${raw}`)) {
    return `RabbitMQ at ${where} refused this client's TLS certificate (${text}): the broker does not trust the CA that signed tls.cert, or the certificate is not valid for client authentication. Use a client certificate signed by the CA in the broker's ssl_options.cacertfile.`;
  }
  if (code === 'ERR_OSSL_BAD_DECRYPT' || /bad decrypt|bad password read/i.test(raw)) {
    return `The TLS private key for ${where} could not be decrypted (${text}): tls.passphrase is missing or wrong.`;
  }
  if (code === 'ERR_SSL_WRONG_VERSION_NUMBER' || /wrong version number|packet length too long/i.test(raw)) {
    return `The server at ${where} does not speak TLS (${text}). Use the broker's TLS port in ${setting} (5671 by default) with amqps://, or amqp:// for a plain port (5672).`;
  }
  return undefined;
}
