/**
 * A CLI script in miniature: one `createResilientFetch` request under top-level await, with
 * nothing else holding the event loop. It must print the whole answer and exit 0 right after.
 */
import { createResilientFetch } from '../../../src/index.js'
import { printAnswer, printSettled } from './answer.js'

const url = process.argv[2] as string
const resilientFetch = createResilientFetch()
const response = await resilientFetch(url, {
  method: 'POST',
  headers: { 'content-type': 'application/json', authorization: 'Bearer test' },
  body: JSON.stringify({ model: 'm', stream: true, messages: [{ role: 'user', content: 'hi' }] }),
})
await printAnswer(response)
printSettled()
