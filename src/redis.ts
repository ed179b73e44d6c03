/**
 * `stream-boundary/redis`: a key pool whose state is shared by many gateway replicas.
 * Nothing is exported yet.
 *
 * @module
 */

export {}
