/**
 * Preloaded (`--import`) into a README snippet's own process by run-snippets.test.ts: makes
 * the OpenTelemetry SDK the global tracer provider, and writes every ended span as one JSON
 * line (name, status code, attributes) to the file `SPANS_FILE` names, for the test to read.
 */

import { appendFileSync } from 'node:fs'
import { trace } from '@opentelemetry/api'
import {
  BasicTracerProvider,
  type ReadableSpan,
  SimpleSpanProcessor,
  type SpanExporter,
} from '@opentelemetry/sdk-trace-base'

const file = process.env.SPANS_FILE
if (file === undefined) throw new Error('SPANS_FILE is not set')

const toFile: SpanExporter = {
  export(spans: ReadableSpan[], done) {
    for (const span of spans)
      appendFileSync(
        file,
        `${JSON.stringify({ name: span.name, status: span.status.code, attributes: span.attributes })}\n`,
      )
    done({ code: 0 })
  },
  shutdown: () => Promise.resolve(),
}

trace.setGlobalTracerProvider(
  new BasicTracerProvider({ spanProcessors: [new SimpleSpanProcessor(toFile)] }),
)
