// End to end: /v1/responses through the official openai SDK and /v1/messages (+ count_tokens)
// through the official Anthropic SDK, against `kimi serve` on the random tiny model. The model
// writes noise, so the checks are on shapes, event order and indexes, never on content.
// Every check throws on failure; the last line is "N passed, 0 failed" when all pass.
// Usage: node e2e.js BASE_URL   (the server runs with --api-key secret and the kimi_k2 parsers)
'use strict';
const OpenAI = require('openai');
const Anthropic = require('@anthropic-ai/sdk');
const { assert, eq, check, summary, expectStatus } = require('./e2e_helpers.js');

const base = process.argv[2];
// Bounded: the whole run must end well within a minute.
setTimeout(() => { console.log('FAIL: timed out after 50 s'); process.exit(1); }, 50000).unref();

const weatherTool = { type: 'function', name: 'get_weather', description: 'Current weather',
  parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } };

// Tools whose arguments the random model can finish within a few tokens (enums), for the forced
// tool_choice checks: every forced call must name an allowed tool and carry valid arguments.
const cities = ['NYC', 'Paris', 'Tokyo'];
const cityTool = { type: 'function', name: 'get_city', description: 'A city by country',
  parameters: { type: 'object', properties: { country: { enum: ['US', 'FR'] } }, required: ['country'], additionalProperties: false } };
const weatherEnumTool = { type: 'function', name: 'get_weather', description: 'Current weather',
  parameters: { type: 'object', properties: { city: { enum: cities } }, required: ['city'], additionalProperties: false } };
const anthropicCityTool = { name: 'get_city', description: 'A city by country', input_schema: cityTool.parameters };
const anthropicWeatherEnumTool = { name: 'get_weather', description: 'Current weather',
  input_schema: weatherEnumTool.parameters };
function checkForcedArguments(name, args) {
  if (name === 'get_city') {
    eq(Object.keys(args), ['country'], 'get_city arguments');
    assert(['US', 'FR'].includes(args.country), 'country ' + JSON.stringify(args));
  } else {
    eq(name, 'get_weather', 'an allowed tool');
    eq(Object.keys(args), ['city'], 'get_weather arguments');
    assert(cities.includes(args.city), 'city ' + JSON.stringify(args));
  }
}

function checkUsage(u, maxOut) {
  assert(Number.isInteger(u.input_tokens) && u.input_tokens > 0, 'input_tokens ' + JSON.stringify(u));
  assert(Number.isInteger(u.output_tokens) && u.output_tokens > 0 && u.output_tokens <= maxOut, 'output_tokens ' + JSON.stringify(u));
}

// ------------------------------------------------------------------------------------ Responses
function checkResponse(r, maxOut) {
  assert(r.object === 'response', 'object');
  assert(/^resp_/.test(r.id), 'id ' + r.id);
  assert(r.model === 'tiny', 'model');
  assert(['completed', 'incomplete'].includes(r.status), 'status ' + r.status);
  if (r.status === 'incomplete') eq(r.incomplete_details, { reason: 'max_output_tokens' }, 'incomplete_details');
  assert(Array.isArray(r.output) && r.output.length > 0, 'output');
  for (const item of r.output) {
    assert(typeof item.id === 'string' && item.status === 'completed', 'item ' + JSON.stringify(item));
    if (item.type === 'message') {
      assert(item.role === 'assistant' && item.content[0].type === 'output_text', 'message item');
    } else if (item.type === 'reasoning') {
      assert(item.content[0].type === 'reasoning_text' && typeof item.content[0].text === 'string', 'reasoning item');
    } else if (item.type === 'function_call') {
      assert(/^functions\.[^:]+:\d+$/.test(item.call_id), 'canonical call_id ' + item.call_id);
    } else {
      throw new Error('unexpected item ' + item.type);
    }
  }
  checkUsage(r.usage, maxOut);
  assert(r.usage.total_tokens === r.usage.input_tokens + r.usage.output_tokens, 'total_tokens');
}

// Event order of a Responses stream: created, in_progress, then each item added ... done with
// matching ids and indexes, then completed or incomplete; sequence numbers count from 0.
function checkResponseEvents(events, maxOut) {
  assert(events.length >= 4, 'events ' + events.length);
  events.forEach((e, i) => assert(e.sequence_number === i, `sequence_number ${e.sequence_number} at ${i}`));
  eq(events[0].type, 'response.created', 'first event');
  eq(events[1].type, 'response.in_progress', 'second event');
  const last = events[events.length - 1];
  assert(['response.completed', 'response.incomplete'].includes(last.type), 'last event ' + last.type);
  let open = null;
  const done = [];
  for (const e of events.slice(2, -1)) {
    if (e.type === 'response.output_item.added') {
      assert(open === null, 'an item added while another is open');
      eq(e.output_index, done.length, 'output_index of an added item');
      open = e.item;
    } else if (e.type === 'response.output_item.done') {
      assert(open && e.item.id === open.id && e.output_index === done.length, 'item done');
      done.push(e.item);
      open = null;
    } else {
      assert(open && e.output_index === done.length, `${e.type} outside its item`);
      if ('item_id' in e) eq(e.item_id, open.id, 'item_id of ' + e.type);
      const kinds = { reasoning: /^response\.(content_part|reasoning_text)\./, message: /^response\.(content_part|output_text)\./,
        function_call: /^response\.function_call_arguments\./ };
      assert(kinds[open.type].test(e.type), `${e.type} in a ${open.type} item`);
    }
  }
  assert(open === null, 'an item left open');
  checkResponse(last.response, maxOut);
  eq(last.response.output, done, 'the final output is the items done');
}

async function responses(client) {
  await check('responses.create: text input, thinking off -> message item', async () => {
    const r = await client.responses.create({ model: 'tiny', input: 'Hello', instructions: 'Be brief.', max_output_tokens: 8,
      temperature: 0, tools: [weatherTool], reasoning: { effort: 'none' } });
    checkResponse(r, 8);
    eq(r.output[0].type, 'message', 'first item');
    assert(typeof r.output_text === 'string', 'the SDK finds output_text');
    eq(r.tools[0].name, 'get_weather', 'tools echoed');
    eq(r.instructions, 'Be brief.', 'instructions echoed');
  });

  await check('responses.create: item history with function calls, thinking on -> reasoning item', async () => {
    // Greedy: sampled at the default temperature, the tiny model's first token was once `</think>`,
    // which rightly leaves no reasoning item.
    const r = await client.responses.create({ model: 'tiny', max_output_tokens: 6, temperature: 0, tools: [weatherTool],
      tool_choice: 'auto', input: [
        { role: 'user', content: 'Weather in NYC?' },
        { type: 'function_call', call_id: 'call_abc123', name: 'get_weather', arguments: '{"city":"NYC"}' },
        { type: 'function_call_output', call_id: 'call_abc123', output: '{"temp": 72}' },
        { type: 'message', role: 'user', content: [{ type: 'input_text', text: 'And Paris?' }] },
      ] });
    checkResponse(r, 6);
    eq(r.output[0].type, 'reasoning', 'first item');
  });

  await check('responses.create stream: event order and indexes', async () => {
    const stream = await client.responses.create({ model: 'tiny', input: 'Hi', max_output_tokens: 6, stream: true,
      tools: [weatherTool], reasoning: { effort: 'none' } });
    const events = [];
    for await (const e of stream) events.push(e);
    checkResponseEvents(events, 6);
    assert(events.some((e) => e.type === 'response.output_text.delta'), 'text deltas');
  });

  await check('responses.stream helper: the SDK accumulates the same output', async () => {
    const stream = client.responses.stream({ model: 'tiny', input: 'Hi', max_output_tokens: 6, tools: [weatherTool] });
    const events = [];
    for await (const e of stream) events.push(e);
    const final = await stream.finalResponse();
    checkResponseEvents(events, 6);
    assert(events.some((e) => e.type === 'response.reasoning_text.delta'), 'reasoning deltas');
    eq(final.output.map((i) => i.type), events[events.length - 1].response.output.map((i) => i.type), 'accumulated items');
  });

  for (const [label, choice] of [['required', 'required'], ['named', { type: 'function', name: 'get_city' }]]) {
    await check(`responses.create: tool_choice ${label} -> one valid call of the allowed tool`, async () => {
      const r = await client.responses.create({ model: 'tiny', input: 'Weather?', max_output_tokens: 128, temperature: 1,
        tools: [weatherEnumTool, cityTool], tool_choice: choice, parallel_tool_calls: false, reasoning: { effort: 'none' } });
      checkResponse(r, 128);
      eq(r.status, 'completed', 'status');
      const calls = r.output.filter((i) => i.type === 'function_call');
      eq(calls.length, 1, 'function_call items');
      if (label === 'named') eq(calls[0].name, 'get_city', 'the named tool');
      checkForcedArguments(calls[0].name, JSON.parse(calls[0].arguments));
    });
  }
  await check('responses: unsupported input is a 400', async () => {
    await expectStatus(client.responses.create({ model: 'tiny', input: 'x', tools: [{ type: 'web_search' }] }), 400);
    const e = await expectStatus(client.responses.create({ model: 'tiny', input: [{ role: 'user', content: [
      { type: 'input_image', image_url: 'data:image/png;base64,AAAA' }] }] }), 400);
    assert(/input\[0\]\.content\[0\] is an 'input_image' part/.test(e.message), e.message);
    await expectStatus(client.responses.create({ model: 'tiny', input: 'x', previous_response_id: 'resp_1' }), 400);
  });
}

// ------------------------------------------------------------------------------------- Messages
function checkMessage(m, maxOut) {
  eq(m.type, 'message', 'type');
  eq(m.role, 'assistant', 'role');
  assert(/^msg_/.test(m.id), 'id ' + m.id);
  eq(m.model, 'tiny', 'model');
  assert(['end_turn', 'max_tokens', 'stop_sequence', 'tool_use'].includes(m.stop_reason), 'stop_reason ' + m.stop_reason);
  for (const b of m.content) {
    if (b.type === 'text') assert(typeof b.text === 'string', 'text block');
    else if (b.type === 'thinking') assert(typeof b.thinking === 'string' && typeof b.signature === 'string', 'thinking block');
    else if (b.type === 'tool_use') assert(/^functions\.[^:]+:\d+$/.test(b.id) && typeof b.input === 'object', 'tool_use block');
    else throw new Error('unexpected block ' + b.type);
  }
  checkUsage(m.usage, maxOut);
}

const anthropicTools = [{ name: 'get_weather', description: 'Current weather',
  input_schema: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } }];
const toolHistory = [
  { role: 'user', content: 'Weather in NYC?' },
  { role: 'assistant', content: [{ type: 'text', text: 'Checking.' },
    { type: 'tool_use', id: 'toolu_01A09q90qw90lq917835lq9', name: 'get_weather', input: { city: 'NYC' } }] },
  { role: 'user', content: [{ type: 'tool_result', tool_use_id: 'toolu_01A09q90qw90lq917835lq9', content: '72F' },
    { type: 'text', text: 'Thanks' }] },
];

async function messages(client) {
  await check('messages.create: text blocks, tools, tool history', async () => {
    const m = await client.messages.create({ model: 'tiny', max_tokens: 8, system: 'Be brief.', tools: anthropicTools,
      tool_choice: { type: 'auto' }, messages: toolHistory, temperature: 0 });
    checkMessage(m, 8);
    assert(m.content.length > 0 && m.content[0].type === 'text', 'thinking off by default: text first');
    const c = await client.messages.countTokens({ model: 'tiny', system: 'Be brief.', tools: anthropicTools,
      tool_choice: { type: 'auto' }, messages: toolHistory });
    eq(Object.keys(c), ['input_tokens'], 'count_tokens shape');
    eq(c.input_tokens, m.usage.input_tokens, 'count_tokens counts the prompt the message ran on');
  });

  await check('messages.create: thinking enabled -> thinking block', async () => {
    const m = await client.messages.create({ model: 'tiny', max_tokens: 6, messages: [{ role: 'user', content: 'Hi' }],
      thinking: { type: 'enabled', budget_tokens: 1024 }, stop_sequences: ['\n\n\n'], temperature: 0 });
    checkMessage(m, 6);
    eq(m.content[0].type, 'thinking', 'first block');
  });

  for (const [label, choice] of [['any', { type: 'any', disable_parallel_tool_use: true }],
    ['tool', { type: 'tool', name: 'get_city', disable_parallel_tool_use: true }]]) {
    await check(`messages.create: tool_choice ${label} -> one valid tool_use of the allowed tool`, async () => {
      const m = await client.messages.create({ model: 'tiny', max_tokens: 128, temperature: 1, tool_choice: choice,
        tools: [anthropicWeatherEnumTool, anthropicCityTool], messages: [{ role: 'user', content: 'Weather?' }] });
      checkMessage(m, 128);
      eq(m.stop_reason, 'tool_use', 'stop_reason');
      const uses = m.content.filter((b) => b.type === 'tool_use');
      eq(uses.length, 1, 'tool_use blocks');
      if (label === 'tool') eq(uses[0].name, 'get_city', 'the named tool');
      checkForcedArguments(uses[0].name, uses[0].input);
    });
  }
  await check('messages.stream: event order, indexes and the accumulated message', async () => {
    // Greedy: a sampled answer could be empty (an end token first), and this check needs blocks.
    const stream = client.messages.stream({ model: 'tiny', max_tokens: 6, tools: anthropicTools, messages: toolHistory,
      thinking: { type: 'enabled', budget_tokens: 1024 }, temperature: 0 });
    const events = [];
    for await (const e of stream) events.push(e);
    const final = await stream.finalMessage();
    checkMessage(final, 6);
    eq(events[0].type, 'message_start', 'first event');
    eq(events[events.length - 2].type, 'message_delta', 'message_delta before the end');
    eq(events[events.length - 1].type, 'message_stop', 'last event');
    let open = -1;
    let next = 0;
    for (const e of events.slice(1, -2)) {
      if (e.type === 'content_block_start') {
        assert(open === -1 && e.index === next, 'block start ' + e.index);
        open = next++;
      } else if (e.type === 'content_block_delta') {
        assert(e.index === open, 'delta index');
        const want = { thinking: 'thinking_delta', text: 'text_delta', tool_use: 'input_json_delta' }[final.content[open].type];
        eq(e.delta.type, want, 'delta type');
      } else if (e.type === 'content_block_stop') {
        assert(e.index === open, 'stop index');
        open = -1;
      } else {
        throw new Error('unexpected event ' + e.type);
      }
    }
    assert(open === -1 && next === final.content.length && next > 0, 'every block closed');
    eq(final.content[0].type, 'thinking', 'thinking first');
    eq(final.usage.input_tokens, events[0].message.usage.input_tokens, 'input tokens');
  });

  await check('messages stream on the wire: named events with a ping', async () => {
    const res = await fetch(base + '/v1/messages', { method: 'POST',
      headers: { 'content-type': 'application/json', 'x-api-key': 'secret', 'anthropic-version': '2023-06-01' },
      body: JSON.stringify({ model: 'tiny', max_tokens: 4, stream: true, messages: [{ role: 'user', content: 'Hi' }] }) });
    eq(res.status, 200, 'status');
    assert(/text\/event-stream/.test(res.headers.get('content-type')), 'content type');
    const text = await res.text();
    const names = text.split('\n').filter((l) => l.startsWith('event: ')).map((l) => l.slice(7));
    const start = JSON.parse(text.split('\n').find((l) => l.startsWith('data: ')).slice(6));
    eq(start.message.content, [], 'message_start content');
    eq(start.message.stop_reason, null, 'message_start stop_reason');
    eq(names.slice(0, 2), ['message_start', 'ping'], 'first events');
    // The sampled answer may be empty (an end token first, or only hidden special tokens): then
    // no content block opens at all.
    assert(['content_block_start', 'message_delta'].includes(names[2]), 'third event ' + names[2]);
    eq(names.slice(-2), ['message_delta', 'message_stop'], 'last events');
  });

  await check('messages: errors in Anthropic shape', async () => {
    let e = await expectStatus(client.messages.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }] }), 400);
    eq(e.error.type, 'error', 'error envelope');
    eq(e.error.error.type, 'invalid_request_error', 'error type');
    assert(/max_tokens/.test(e.error.error.message), e.error.error.message);
    e = await expectStatus(client.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: [
      { type: 'image', source: { type: 'base64', media_type: 'image/png', data: 'AAAA' } }] }] }), 400);
    assert(/messages\[0\]\.content\[0\] is an 'image' block/.test(e.error.error.message), e.error.error.message);
    e = await expectStatus(client.messages.create({ model: 'no-such-model', max_tokens: 4,
      messages: [{ role: 'user', content: 'x' }] }), 404);
    eq(e.error.error.type, 'not_found_error', '404 type');
    const bad = new Anthropic({ baseURL: base, apiKey: 'wrong', maxRetries: 0 });
    e = await expectStatus(bad.messages.create({ model: 'tiny', max_tokens: 4, messages: [{ role: 'user', content: 'x' }] }), 401);
    eq(e.error.error.type, 'authentication_error', '401 type');
  });
}

async function main() {
  await responses(new OpenAI({ baseURL: base + '/v1', apiKey: 'secret', maxRetries: 0 }));
  await messages(new Anthropic({ baseURL: base, apiKey: 'secret', maxRetries: 0 }));
  process.exit(summary() ? 1 : 0);
}

main().catch((e) => { console.log('FAIL ' + (e.stack || e)); process.exit(1); });
