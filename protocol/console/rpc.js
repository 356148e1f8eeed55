// The page's one connection to agentd: JSON-RPC 2.0 over the daemon's
// WebSocket (protocol/README.md is the contract). It reconnects with
// backoff when the socket drops and tells its owner, which resubscribes
// from the last seq it applied.

export class RpcError extends Error {
  constructor(error) {
    super(error.message);
    this.code = error.code;
    this.kind = error.data?.kind ?? 'internal';
    this.data = error.data ?? {};
  }
}

/** Backoff before reconnect attempt `n` (1, 2, …): 0.25 s doubling to 8 s, with jitter. */
export function backoff(n, random = Math.random) {
  const base = Math.min(8000, 250 * 2 ** (n - 1));
  return Math.round(base * (0.75 + random() * 0.5));
}

export class Connection {
  /**
   * @param {string} url  ws://host:port/?token=…
   * @param {object} handlers  onOpen(), onClose(info), onNotify(method, params)
   */
  constructor(url, handlers) {
    this.url = url;
    this.handlers = handlers;
    this.nextId = 1;
    this.pending = new Map();
    this.ws = null;
    this.attempt = 0;
    this.timer = null;
    this.closedByUs = false;
  }

  open() {
    this.closedByUs = false;
    const ws = new WebSocket(this.url);
    this.ws = ws;
    ws.onopen = () => {
      this.attempt = 0;
      this.handlers.onOpen?.();
    };
    ws.onmessage = (e) => this._receive(e.data);
    ws.onclose = (e) => {
      if (this.ws !== ws) return;
      this.ws = null;
      for (const { reject } of this.pending.values()) {
        reject(new RpcError({ code: -32000, message: 'the connection to agentd was lost', data: { kind: 'connection_lost' } }));
      }
      this.pending.clear();
      if (this.closedByUs) return;
      this.attempt += 1;
      const delay = backoff(this.attempt);
      this.handlers.onClose?.({ code: e.code, attempt: this.attempt, delay });
      this.timer = setTimeout(() => this.open(), delay);
    };
  }

  close() {
    this.closedByUs = true;
    clearTimeout(this.timer);
    this.ws?.close();
  }

  get isOpen() {
    return this.ws?.readyState === WebSocket.OPEN;
  }

  /** Call `method`; resolves with the result, rejects with an RpcError. */
  call(method, params = {}) {
    if (!this.isOpen) {
      return Promise.reject(new RpcError({ code: -32000, message: 'not connected to agentd; it reconnects by itself', data: { kind: 'connection_lost' } }));
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.ws.send(JSON.stringify({ jsonrpc: '2.0', id, method, params }));
    });
  }

  _receive(text) {
    const message = JSON.parse(text);
    if (message.id !== undefined && message.id !== null && this.pending.has(message.id)) {
      const { resolve, reject } = this.pending.get(message.id);
      this.pending.delete(message.id);
      if (message.error) reject(new RpcError(message.error));
      else resolve(message.result);
    } else if (message.method) {
      this.handlers.onNotify?.(message.method, message.params);
    } else if (message.error) {
      this.handlers.onNotify?.('error', message.error);
    }
  }
}
