/**
 * `stream-boundary/node`: the Node-only pieces (a sink over `http.ServerResponse`).
 * Nothing is exported yet; the sink arrives with the commit gate.
 *
 * @module
 */

export {}
