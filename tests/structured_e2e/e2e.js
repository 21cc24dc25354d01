// Structured outputs end to end: `kimi serve` on the random tiny model, every schema of the
// corpus (tests/data/structured_schemas.json) through the official OpenAI SDK, streamed and not,
// at temperature 0 and 1; each output must parse and validate against its schema with ajv (an
// independent validator). Also completions with structured_outputs / guided_* and the 400 for an
// unsupported schema feature. The last line is "N passed, 0 failed" when all pass.
'use strict';
const fs = require('fs');
const os = require('os');
const path = require('path');
const OpenAI = require('openai');
const Ajv = require('ajv');
const addFormats = require('ajv-formats');
const e2e = require('./e2e_helpers.js');

const { assert, check, summary } = e2e;

const kimi = process.argv[2];
const corpus = JSON.parse(fs.readFileSync(process.argv[3], 'utf8'));
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kimi-structured-e2e-'));
const MAX_TOKENS = 400;

function startServer(extraArgs) {
  return e2e.startServer(kimi, dir, ['--served-model-name', 'tiny', '--max-model-len', '1024', ...extraArgs]);
}

// Runs the thunks with at most `width` in flight (the engine batches them).
async function pool(width, thunks) {
  let next = 0;
  const workers = Array.from({ length: width }, async () => {
    while (next < thunks.length) await thunks[next++]();
  });
  await Promise.all(workers);
}

async function generate(client, schema, name, stream, temperature, seed) {
  const req = {
    model: 'tiny', messages: [{ role: 'user', content: `Give me ${name} as JSON.` }], max_tokens: MAX_TOKENS,
    temperature, seed, response_format: { type: 'json_schema', json_schema: { name: 'out', schema, strict: true } },
  };
  if (!stream) {
    const r = await client.chat.completions.create(req);
    return { text: r.choices[0].message.content, finish: r.choices[0].finish_reason };
  }
  const s = await client.chat.completions.create({ ...req, stream: true });
  let text = '', finish = null;
  for await (const chunk of s) {
    const c = chunk.choices[0];
    if (!c) continue;
    if (c.delta && c.delta.content) text += c.delta.content;
    if (c.finish_reason) finish = c.finish_reason;
  }
  return { text, finish };
}

(async () => {
  const server = await startServer([]);
  const client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const ajv = new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  try {
    assert(corpus.length >= 40, `the corpus has ${corpus.length} schemas, want >= 40`);
    const jobs = [];
    corpus.forEach((entry, i) => {
      const validate = ajv.compile(entry.schema);
      for (const stream of [false, true])
        for (const temperature of [0, 1])
          jobs.push(() => check(`${entry.name} stream=${stream} T=${temperature}`, async () => {
            const { text, finish } = await generate(client, entry.schema, entry.name, stream, temperature, 1000 + i);
            assert(finish === 'stop', `finish_reason ${finish} (output ${JSON.stringify(text)})`);
            let value;
            try { value = JSON.parse(text); } catch (e) { throw new Error(`not JSON: ${JSON.stringify(text)}`); }
            assert(validate(value), `invalid for the schema: ${JSON.stringify(text)}: ${ajv.errorsText(validate.errors)}`);
          }));
    });
    await pool(16, jobs);

    // /v1/completions with vLLM's fields.
    const completion = async (extra) => {
      const r = await client.completions.create({ model: 'tiny', prompt: 'Answer:', max_tokens: 200, temperature: 1, seed: 5, ...extra });
      assert(r.choices[0].finish_reason === 'stop', 'finish_reason ' + r.choices[0].finish_reason);
      return r.choices[0].text;
    };
    await check('completions structured_outputs.regex', async () => {
      const t = await completion({ structured_outputs: { regex: '[a-z]{2,5}-\\d{1,3}' } });
      assert(/^[a-z]{2,5}-\d{1,3}$/.test(t), JSON.stringify(t));
    });
    await check('completions structured_outputs.choice', async () => {
      const t = await completion({ structured_outputs: { choice: ['left', 'right', 'up down'] } });
      assert(['left', 'right', 'up down'].includes(t), JSON.stringify(t));
    });
    await check('completions structured_outputs.grammar', async () => {
      const t = await completion({ structured_outputs: { grammar: 'root ::= "(" [0-9]{1,2} ("," [0-9]{1,2}){0,3} ")"' } });
      assert(/^\(\d{1,2}(,\d{1,2}){0,3}\)$/.test(t), JSON.stringify(t));
    });
    await check('completions guided_json', async () => {
      const schema = { type: 'object', properties: { n: { type: 'integer', minimum: 0, maximum: 9 } }, required: ['n'] };
      const t = await completion({ guided_json: schema });
      assert(ajv.validate(schema, JSON.parse(t)), JSON.stringify(t));
    });
    await check('chat guided_choice and guided_regex', async () => {
      const r = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'pick' }], max_tokens: 50, guided_choice: ['A', 'B'] });
      assert(['A', 'B'].includes(r.choices[0].message.content), r.choices[0].message.content);
      const q = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'hex' }], max_tokens: 50, guided_regex: '0x[0-9a-f]{4}' });
      assert(/^0x[0-9a-f]{4}$/.test(q.choices[0].message.content), q.choices[0].message.content);
    });
    await check('unsupported schema feature is a 400 naming it', async () => {
      for (const [schema, feature] of [[{ type: 'integer', multipleOf: 3 }, 'multipleOf'], [{ type: 'object', patternProperties: { a: {} } }, 'patternProperties'],
        [{ type: 'string', format: 'hostname' }, 'hostname']]) {
        try {
          await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 5,
            response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
          throw new Error('expected a 400 for ' + feature);
        } catch (e) {
          assert(e.status === 400, `status ${e.status} for ${feature}: ${e.message}`);
          assert(e.message.includes(feature), `message does not name ${feature}: ${e.message}`);
        }
      }
      try {
        await client.completions.create({ model: 'tiny', prompt: 'x', max_tokens: 5, structured_outputs: { regex: '(a' } });
        throw new Error('expected a 400 for a bad regex');
      } catch (e) {
        assert(e.status === 400, `status ${e.status}: ${e.message}`);
      }
    });
  } finally {
    server.proc.kill('SIGTERM');
  }
  // tool_choice required / named with the kimi_k2 tool parser: every response carries valid
  // calls of the allowed functions, streamed and not.
  const tserver = await startServer(['--tool-call-parser', 'kimi_k2', '--enable-auto-tool-choice']);
  const tclient = new OpenAI({ baseURL: tserver.base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
  const tools = [
    { type: 'function', function: { name: 'get_weather', parameters: { type: 'object', properties: {
      city: { enum: ['Paris', 'Oslo'] }, days: { type: 'integer', minimum: 1, maximum: 7 } }, required: ['city', 'days'] } } },
    { type: 'function', function: { name: 'lookup', parameters: { type: 'object', properties: {
      id: { type: 'string', format: 'uuid' } }, required: ['id'] } } },
  ];
  const validators = Object.fromEntries(tools.map((t) => [t.function.name, ajv.compile(t.function.parameters)]));
  try {
    for (const [choice, label] of [['required', 'required'], [{ type: 'function', function: { name: 'lookup' } }, 'named']])
      for (const parallel of [true, false])
        for (const stream of [false, true])
          await check(`tool_choice ${label} parallel=${parallel} stream=${stream}`, async () => {
            for (let seed = 0; seed < 3; ++seed) {
              const req = { model: 'tiny', messages: [{ role: 'user', content: 'weather?' }], tools, tool_choice: choice,
                parallel_tool_calls: parallel, max_tokens: 300, temperature: 1, seed };
              let calls = [], finish;
              if (!stream) {
                const r = await tclient.chat.completions.create(req);
                calls = r.choices[0].message.tool_calls || [];
                finish = r.choices[0].finish_reason;
              } else {
                const s = await tclient.chat.completions.create({ ...req, stream: true });
                for await (const chunk of s) {
                  const c = chunk.choices[0];
                  if (!c) continue;
                  for (const d of (c.delta && c.delta.tool_calls) || []) {
                    if (!calls[d.index]) calls[d.index] = { id: d.id, function: { name: d.function.name, arguments: '' } };
                    calls[d.index].function.arguments += d.function.arguments || '';
                  }
                  if (c.finish_reason) finish = c.finish_reason;
                }
              }
              assert(finish === 'tool_calls', `finish_reason ${finish}`);
              assert(calls.length >= 1, 'no tool call');
              if (!parallel) assert(calls.length === 1, `${calls.length} calls with parallel_tool_calls false`);
              calls.forEach((c, k) => {
                const name = c.function.name;
                assert(label !== 'named' || name === 'lookup', `named choice, got ${name}`);
                assert(validators[name], `unknown tool ${name}`);
                assert(c.id === `functions.${name}:${k}`, `id ${c.id}`);
                const args = JSON.parse(c.function.arguments);
                assert(validators[name](args), `arguments ${c.function.arguments}: ${ajv.errorsText(validators[name].errors)}`);
              });
            }
          });
  } finally {
    tserver.proc.kill('SIGTERM');
  }

  // A reasoning model with thinking off: the constraint applies from the first token.
  const rserver = await startServer(['--reasoning-parser', 'kimi_k2']);
  const rclient = new OpenAI({ baseURL: rserver.base + '/v1', apiKey: 'none', maxRetries: 0, timeout: 120000 });
  try {
    await check('reasoning parser, thinking off: json_schema holds', async () => {
      const schema = { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] };
      const r = await rclient.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'x' }], max_tokens: 100,
        chat_template_kwargs: { thinking: false }, response_format: { type: 'json_schema', json_schema: { name: 'x', schema } } });
      assert(ajv.validate(schema, JSON.parse(r.choices[0].message.content)), r.choices[0].message.content);
    });
  } finally {
    rserver.proc.kill('SIGTERM');
  }
  const failed = summary();
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(failed ? 1 : 0);
})().catch((e) => {
  console.log('FAIL setup: ' + (e.stack || e));
  process.exit(1);
});
