/** Property run counts: the normal suite's, or 25× that under `npm run test:deep`. */
export function runs(normal: number): number {
  return process.env.STREAM_BOUNDARY_DEEP ? normal * 25 : normal
}
