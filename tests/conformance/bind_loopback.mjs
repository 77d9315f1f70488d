// Preloaded (node --import) into the vendored everything-server, which is kept as upstream has it:
// its app.listen(PORT) names no host, so it would listen on every interface. A listen() given
// only a port (and perhaps a callback) gets 127.0.0.1 as its host here; nothing else changes.
import net from 'node:net';

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const portOnly =
    (typeof args[0] === 'number' || (typeof args[0] === 'string' && /^\d+$/.test(args[0]))) &&
    (args.length === 1 || typeof args[1] === 'function');
  if (portOnly) {
    args.splice(1, 0, '127.0.0.1');
  }
  return listen.apply(this, args);
};
