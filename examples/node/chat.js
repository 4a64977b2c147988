#!/usr/bin/env node
// Chat with tokenwire from Node.js and read the token ids: a unary call, a
// stream (token-id deltas per chunk), and a two-turn Session where turn 2
// continues turn 1 by id with only the new message.
//
//   node chat.js [--server 127.0.0.1:50051] [--json] [question]
'use strict';

const { connect, message } = require('./client');

function parseArgs(argv) {
  const opts = { server: process.env.TOKENWIRE_SERVER || '127.0.0.1:50051', json: false, words: [] };
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--server') opts.server = argv[++i];
    else if (argv[i] === '--json') opts.json = true;
    else opts.words.push(argv[i]);
  }
  opts.question = opts.words.join(' ') || 'What is the capital of France?';
  return opts;
}

// Run two turns on one Session stream; resolve with the events per request.
function sessionTwoTurns(stub, question) {
  return new Promise((resolve, reject) => {
    const events = {};
    const call = stub.Session();
    call.on('data', (ev) => {
      (events[ev.request_id] = events[ev.request_id] || []).push(ev);
      if (ev.request_id === 'turn-1' && ev.event === 'done') {
        call.write({
          start: {
            request_id: 'turn-2',
            chat: { max_tokens: 16, temperature: 0, return_token_ids: true },
            continuation: { previous_request_id: 'turn-1', messages: [message('user', 'And of Germany?')] },
          },
        });
        call.end(); // half-close: the server finishes turn 2, then ends the stream
      }
      if (ev.event === 'error') reject(new Error(`${ev.request_id}: ${ev.error.code} ${ev.error.message}`));
    });
    call.on('error', reject);
    call.on('end', () => resolve(events));
    call.write({
      start: {
        request_id: 'turn-1',
        chat: { messages: [message('user', question)], max_tokens: 16, temperature: 0, return_token_ids: true },
      },
    });
  });
}

async function main() {
  const opts = parseArgs(process.argv.slice(2));
  const client = connect(opts.server);
  try {
    const request = { messages: [message('user', opts.question)], max_tokens: 32, temperature: 0, return_token_ids: true };
    const unary = await client.chat(request);
    const chunks = await client.streamChat(request);
    const streamIds = chunks.flatMap((c) => c.choices.flatMap((ch) => ch.token_ids));
    const streamText = chunks.map((c) => c.choices.map((ch) => ch.delta.content || '').join('')).join('');
    const events = await sessionTwoTurns(client.stub, opts.question);
    const t1 = events['turn-1'].find((e) => e.event === 'chat_result').chat_result;
    const t2 = events['turn-2'].find((e) => e.event === 'chat_result').chat_result;
    const done2 = events['turn-2'].find((e) => e.event === 'done').done;
    const result = {
      model: unary.model,
      text: unary.choices[0].message.content,
      prompt_token_ids: unary.prompt_token_ids,
      token_ids: unary.choices[0].token_ids,
      finish_reason: unary.choices[0].finish_reason,
      stream: { text: streamText, token_ids: streamIds, chunks: chunks.length },
      session: {
        turn1: { prompt_token_ids: t1.prompt_token_ids, token_ids: t1.choices[0].token_ids },
        turn2: {
          text: t2.choices[0].message.content,
          prompt_token_ids: t2.prompt_token_ids,
          suffix_token_ids: done2.suffix_token_ids,
          cached_tokens: t2.usage.prompt_tokens_details.cached_tokens,
        },
      },
    };
    if (opts.json) {
      process.stdout.write(JSON.stringify(result) + '\n');
    } else {
      console.log(`${result.model}: ${result.text}`);
      console.log(`prompt ids (${result.prompt_token_ids.length}): ${result.prompt_token_ids.join(' ')}`);
      console.log(`completion ids: ${result.token_ids.join(' ')}`);
      console.log(`streamed ids in ${result.stream.chunks} chunks: ${result.stream.token_ids.join(' ')}`);
      console.log(`session turn 2: ${result.session.turn2.text}`);
      console.log(`  suffix ids: ${result.session.turn2.suffix_token_ids.join(' ')}; cached: ${result.session.turn2.cached_tokens}`);
    }
  } finally {
    client.close();
  }
}

main().catch((err) => {
  console.error(`error: ${err.code !== undefined ? `code ${err.code}: ` : ''}${err.details || err.message}`);
  process.exit(1);
});
