/**
 * `npm run demo`: the side-by-side demo of a plain relay and a stream-boundary gateway on an
 * embedded fault-injecting upstream. It lands with the gateway examples; until then this
 * says so and exits 0.
 */
console.log(
  'stream-boundary demo: not yet. The frame reader is in; the demo arrives with the gateways.',
)
