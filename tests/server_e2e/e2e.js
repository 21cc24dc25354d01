// End to end: `kimi serve` on the tiny model, driven by the official OpenAI SDK and raw HTTP.
// Every check throws on failure; the last line is "N passed, 0 failed" when all pass.
// With --disagg the same checks run against `kimi proxy` in front of a producer and a consumer
// (1P1D, KV over UCX); what the proxy does not route (/tokenize, /health, /metrics) and the
// drain on SIGTERM go to the decode instance behind it.
'use strict';
const { execFileSync } = require('child_process');
const fs = require('fs');
const os = require('os');
const path = require('path');
const OpenAI = require('openai');
const e2e = require('./e2e_helpers.js');

const { assert, check, summary, expectStatus } = e2e;

const kimi = process.argv[2];
// With --eagle3 every server runs speculative decoding with an Eagle3 draft for the tiny model
// (`kimi make-model --draft eagle3`): every check must pass as without it.
const eagle3 = process.argv.includes('--eagle3');
const disagg = process.argv.includes('--disagg');
// With --tp2dp2 every server is 4 processes: 2 data-parallel replicas of 2 tensor-parallel ranks,
// the routed experts dealt out over all 4 (--enable-expert-parallel).
const tp2dp2 = process.argv.includes('--tp2dp2');
const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'kimi-e2e-'));

// `kimi serve` on the tiny model, as tiny and kimi-tiny, behind --api-key secret.
async function startServer(extraArgs) {
  const speculative = [];
  if (eagle3) {
    const draft = path.join(dir, 'tiny-eagle3');
    if (!fs.existsSync(draft)) execFileSync(kimi, ['make-model', draft, '--preset', 'tiny', '--draft', 'eagle3']);
    speculative.push('--speculative-config', JSON.stringify({ method: 'eagle3', model: draft, num_speculative_tokens: 3 }));
  }
  const parallel = [];
  if (tp2dp2) {
    parallel.push('-tp', '2', '-dp', '2', '--enable-expert-parallel', '--threads', '1',
      '--data-parallel-rpc-port', String(await e2e.freePort()));
  }
  const args = ['--served-model-name', 'tiny,kimi-tiny', '--max-model-len', '512', '--api-key', 'secret',
    ...speculative, ...parallel, ...extraArgs];
  return disagg ? startDisaggregated(args) : e2e.startServer(kimi, dir, args);
}

// A producer and a consumer `kimi serve` with ARGS and `kimi proxy` in front. The object is the
// proxy's, with `instance` the decode instance and `procs` every process.
async function startDisaggregated(args) {
  const kv = (role) => ['--kv-transfer-config', JSON.stringify({ kv_connector: 'NixlConnector', kv_role: role,
    kv_ip: '127.0.0.1', kv_port: 0 })];
  const prefill = await e2e.startServer(kimi, dir, [...args, ...kv('kv_producer')]);
  const decode = await e2e.startServer(kimi, dir, [...args, ...kv('kv_consumer')]);
  const proxy = await e2e.startProcess(kimi, ['proxy', '--host', '127.0.0.1', '--port', '0',
    '--prefiller-hosts', '127.0.0.1', '--prefiller-ports', String(prefill.port),
    '--decoder-hosts', '127.0.0.1', '--decoder-ports', String(decode.port)]);
  return { ...proxy, instance: decode, procs: [prefill.proc, decode.proc, proxy.proc] };
}

async function raw(base, route, body, headers = {}) {
  const res = await fetch(base + route, {
    method: 'POST', body: typeof body === 'string' ? body : JSON.stringify(body),
    headers: { 'Content-Type': 'application/json', Authorization: 'Bearer secret', ...headers },
  });
  return { status: res.status, json: await res.json().catch(() => null) };
}

async function metric(base, name) {
  const text = await (await fetch(base + '/metrics')).text();
  const line = text.split('\n').find((l) => l.startsWith(name + '{') || l.startsWith(name + ' '));
  return line ? Number(line.split(' ').pop()) : NaN;
}

async function main() {
  const server = await startServer(['--reasoning-parser', 'kimi_k2', '--tool-call-parser', 'kimi_k2',
    '--enable-auto-tool-choice', '--trust-remote-code']);
  // The instance itself: the server, or with --disagg the decode instance behind the proxy.
  const instance = server.instance || server;
  const client = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'secret', maxRetries: 0 });

  await check('models list', async () => {
    const models = await client.models.list();
    const ids = models.data.map((m) => m.id);
    assert(ids.includes('tiny') && ids.includes('kimi-tiny'), JSON.stringify(ids));
  });

  await check('completion', async () => {
    const r = await client.completions.create({ model: 'tiny', prompt: 'Hello world', max_tokens: 5, temperature: 0, ignore_eos: true });
    assert(typeof r.choices[0].text === 'string', 'text');
    assert(r.choices[0].finish_reason === 'length', r.choices[0].finish_reason);
    assert(r.usage.completion_tokens === 5, JSON.stringify(r.usage));
    assert(r.usage.total_tokens === r.usage.prompt_tokens + 5, 'usage sums');
    const again = await client.completions.create({ model: 'tiny', prompt: 'Hello world', max_tokens: 5, temperature: 0, ignore_eos: true });
    assert(again.choices[0].text === r.choices[0].text, 'greedy is deterministic');
  });

  await check('completion with n, logprobs and echo', async () => {
    const r = await client.completions.create({ model: 'kimi-tiny', prompt: ['One', 'Two'], n: 2, max_tokens: 3,
      logprobs: 2, seed: 7, echo: true, ignore_eos: true });
    assert(r.choices.length === 4, 'four choices');
    assert(r.choices[0].text.startsWith('One') && r.choices[2].text.startsWith('Two'), 'echo');
    // With echo the prompt tokens come first (the first without a logprob), as in OpenAI's API.
    const lp = r.choices[0].logprobs;
    assert(lp.token_logprobs.length === lp.tokens.length && lp.tokens.length > 3, 'logprobs per token');
    assert(lp.token_logprobs[0] === null && lp.top_logprobs[0] === null, 'first prompt token has no logprob');
    assert(lp.text_offset.length === lp.tokens.length && lp.text_offset[0] === 0, 'text offsets');
    assert(lp.tokens.join('').startsWith('One'), 'tokens spell the echoed text');
    assert(r.usage.completion_tokens === 12, JSON.stringify(r.usage));
  });

  await check('hostile request bodies (issue 19)', async () => {
    const deep = '{"x":' + '['.repeat(100000) + ']'.repeat(100000) + ',"y":1}';
    for (const route of ['/tokenize', '/v1/completions', '/v1/chat/completions']) {
      const r = await raw(route === '/tokenize' ? instance.base : server.base, route, deep);
      assert(r.status === 400 && r.json.error.message.includes('levels deep'), route + ': ' + r.status);
    }
    let r = await raw(server.base, '/v1/completions', '{"model":"tiny","prompt":[4294967301],"max_tokens":1}');
    assert(r.status === 400 && r.json.error.param === 'prompt', 'token id beyond int32: ' + JSON.stringify(r.json));
    r = await raw(server.base, '/v1/completions', '{"model":"tiny","prompt":"x","n":4294967297}');
    assert(r.status === 400 && r.json.error.param === 'n', 'n beyond int32: ' + JSON.stringify(r.json));
    r = await raw(server.base, '/v1/completions', '{"model":"tiny","prompt":"x","max_tokens":9223372036854775807}');
    assert(r.status === 400 && r.json.error.param === 'max_tokens', 'max_tokens overflow: ' + JSON.stringify(r.json));
    r = await raw(server.base, '/v1/completions', { model: 'tiny', prompt: 'x', temperature: -1 });
    assert(r.status === 400 && r.json.error.param === 'temperature', 'engine-side param: ' + JSON.stringify(r.json));
    r = await raw(server.base, '/v1/chat/completions', { model: 'tiny', messages: [{ role: 'user', content: [
      { type: 'text', text: 'what is this' }, { type: 'image_url', image_url: { url: 'file:///etc/passwd' } }] }] });
    assert(r.status === 400 && r.json.error.message.includes('text only'), 'media part: ' + JSON.stringify(r.json));
    const health = await fetch(instance.base + '/health');
    assert(health.status === 200, 'still serving');
  });

  await check('chat with reasoning split', async () => {
    const r = await client.chat.completions.create({ model: 'tiny', messages: [
      { role: 'system', content: 'You are terse.' }, { role: 'user', content: 'What is 2+2?' }], max_tokens: 8 });
    const m = r.choices[0].message;
    assert(m.role === 'assistant', 'role');
    assert(typeof m.reasoning_content === 'string', 'reasoning_content is a string with thinking on');
    assert(r.usage.completion_tokens >= 1, 'usage');
    const off = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 8, chat_template_kwargs: { thinking: false } });
    assert(off.choices[0].message.reasoning_content == null, 'no reasoning with thinking off');
    assert(typeof off.choices[0].message.content === 'string', 'content');
  });

  await check('streaming chat with usage', async () => {
    const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 6, stream: true, stream_options: { include_usage: true }, chat_template_kwargs: { thinking: false },
      ignore_eos: true });
    let text = '', finish = null, usage = null, chunks = 0;
    for await (const chunk of stream) {
      chunks++;
      if (chunk.usage) usage = chunk.usage;
      for (const c of chunk.choices) {
        text += c.delta.content || '';
        if (c.finish_reason) finish = c.finish_reason;
      }
    }
    assert(chunks >= 2, 'chunks');
    assert(finish === 'length', 'finish ' + finish);
    assert(usage && usage.completion_tokens === 6, JSON.stringify(usage));
    const whole = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 6, temperature: 0, chat_template_kwargs: { thinking: false } });
    const streamed = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: 'Hi' }],
      max_tokens: 6, temperature: 0, stream: true, chat_template_kwargs: { thinking: false } });
    let s = '';
    for await (const chunk of streamed) for (const c of chunk.choices) s += c.delta.content || '';
    assert(s === whole.choices[0].message.content, 'streamed text equals the whole text');
  });

  await check('tools on the HTTP path', async () => {
    const tools = [{ type: 'function', function: { name: 'get_weather', description: 'Weather for a city',
      parameters: { type: 'object', properties: { city: { type: 'string' } }, required: ['city'] } } }];
    const r = await client.chat.completions.create({ model: 'tiny', messages: [
      { role: 'user', content: 'Weather in NYC?' },
      { role: 'assistant', content: null, tool_calls: [{ id: 'functions.get_weather:0', type: 'function',
        function: { name: 'get_weather', arguments: '{"city": "NYC"}' } }] },
      { role: 'tool', tool_call_id: 'functions.get_weather:0', content: '{"temp": 72}' }], tools, max_tokens: 8 });
    const m = r.choices[0].message;
    assert(Array.isArray(m.tool_calls), 'tool_calls is a list');
    assert(['length', 'stop', 'tool_calls'].includes(r.choices[0].finish_reason), r.choices[0].finish_reason);
    const tok = await raw(instance.base, '/tokenize', { model: 'tiny', messages: [{ role: 'user', content: 'Hi' }], tools });
    assert(tok.status === 200 && tok.json.count > 10, 'tokenize renders the tool declaration');
  });

  if (disagg) {
    await check("the decode instance pulled the prompts' KV from the prefill instance", async () => {
      const loads = await metric(instance.base, 'kimi:kv_transfer_loads_total');
      const failures = await metric(instance.base, 'kimi:kv_transfer_failures_total');
      const bytes = await metric(instance.base, 'kimi:kv_transfer_bytes_total');
      assert(loads > 0 && bytes > 0 && failures === 0, `loads ${loads}, bytes ${bytes}, failures ${failures}`);
    });
  }

  if (tp2dp2) {
    await check('both data-parallel replicas served requests (engine-labelled metrics)', async () => {
      for (let i = 0; i < 4; ++i) await client.completions.create({ model: 'tiny', prompt: 'Hello', max_tokens: 2 });
      const text = await (await fetch(instance.base + '/metrics')).text();
      for (const engine of ['0', '1']) {
        const line = text.split('\n').find((l) => l.startsWith('kimi:prompt_tokens_total{') &&
          l.includes(`engine="${engine}"`));
        assert(line && Number(line.split(' ').pop()) > 0, `replica ${engine}: ${line}`);
      }
      // Four ranks on this machine share the default fraction of RAM for their KV caches.
      assert(instance.log().includes("shared by this node's 4 ranks"), 'KV fraction shared: ' + instance.log());
    });
  }

  if (eagle3) {
    await check('the Eagle3 draft verified drafts (spec_decode counters)', async () => {
      const drafts = await metric(instance.base, 'kimi:spec_decode_num_drafts_total');
      const tokens = await metric(instance.base, 'kimi:spec_decode_num_draft_tokens_total');
      assert(drafts > 0 && tokens >= drafts, `drafts ${drafts}, draft tokens ${tokens}`);
    });
  }

  await check('tokenize and detokenize', async () => {
    const t = await raw(instance.base, '/tokenize', { prompt: 'Hello world' });
    const d = await raw(instance.base, '/detokenize', { tokens: t.json.tokens });
    assert(d.json.prompt === 'Hello world', JSON.stringify(d.json));
  });

  await check('errors', async () => {
    await expectStatus(client.completions.create({ model: 'nope', prompt: 'x' }), 404);
    const bad = new OpenAI({ baseURL: server.base + '/v1', apiKey: 'wrong', maxRetries: 0 });
    await expectStatus(bad.models.list(), 401);
    let r = await raw(server.base, '/v1/chat/completions', '{"model": "tiny", "messages": [');
    assert(r.status === 400 && r.json.error.message.includes('JSON'), 'malformed JSON: ' + JSON.stringify(r));
    r = await raw(server.base, '/v1/completions', { model: 'tiny', prompt: 'x', max_tokens: 'many' });
    assert(r.status === 400 && r.json.error.param === 'max_tokens', 'wrong type: ' + JSON.stringify(r));
    r = await raw(server.base, '/v1/completions', { model: 'tiny', prompt: 'word '.repeat(2000) });
    assert(r.status === 400 && r.json.error.message.includes('maximum context length'), 'too long: ' + JSON.stringify(r));
    r = await raw(server.base, '/v1/completions', { model: 'tiny', prompt: 'x', n: 1000 });
    assert(r.status === 400, 'n too large');
    r = await raw(server.base, '/v1/chat/completions', { model: 'tiny', messages: [{ role: 'wizard', content: 'x' }] });
    assert(r.status === 400, 'bad role');
    r = await raw(server.base, '/v1/completions', JSON.stringify({ model: 'tiny', prompt: 'x'.repeat(40 << 20) }));
    assert(r.status === 413, 'body too large: ' + r.status);
    const health = await fetch(instance.base + '/health');
    assert(health.status === 200, 'still serving');
  });

  await check('64 concurrent streaming clients', async () => {
    const one = async (i) => {
      const stream = await client.chat.completions.create({ model: 'tiny', messages: [{ role: 'user', content: `Client ${i}` }],
        max_tokens: 5, stream: true, stream_options: { include_usage: true }, chat_template_kwargs: { thinking: false },
        ignore_eos: true });
      let finish = null, usage = null;
      for await (const chunk of stream) {
        if (chunk.usage) usage = chunk.usage;
        for (const c of chunk.choices) if (c.finish_reason) finish = c.finish_reason;
      }
      assert(finish === 'length' && usage && usage.completion_tokens === 5, `client ${i}: ${finish} ${JSON.stringify(usage)}`);
    };
    await Promise.all(Array.from({ length: 64 }, (_, i) => one(i)));
  });

  await check('client disconnect aborts the request', async () => {
    const ac = new AbortController();
    const res = await fetch(server.base + '/v1/completions', {
      method: 'POST', signal: ac.signal,
      headers: { 'Content-Type': 'application/json', Authorization: 'Bearer secret' },
      body: JSON.stringify({ model: 'tiny', prompt: 'Go on', max_tokens: 400, stream: true, ignore_eos: true }),
    });
    const reader = res.body.getReader();
    await reader.read();
    ac.abort();
    let running = NaN;
    for (let i = 0; i < 100; i++) {
      await new Promise((r) => setTimeout(r, 50));
      running = await metric(instance.base, 'kimi:num_requests_running');
      if (running === 0) break;
    }
    assert(running === 0, 'running requests after disconnect: ' + running);
    const aborted = await metric(instance.base, 'kimi:request_success_total{finished_reason="abort"');
    assert(!(aborted === 0), 'abort counted');
  });

  await check('SIGTERM drains in-flight requests, then exits', async () => {
    const pending = client.completions.create({ model: 'tiny', prompt: 'Last one', max_tokens: 30, ignore_eos: true });
    await new Promise((r) => setTimeout(r, 100));
    const exited = new Promise((resolve) => instance.proc.on('exit', (code) => resolve(code)));
    instance.proc.kill('SIGTERM');
    const r = await pending;
    assert(r.usage.completion_tokens === 30, 'in-flight request completed');
    const code = await exited;
    assert(code === 0, 'exit code ' + code);
  });

  await check('429 when the waiting queue is over --max-waiting', async () => {
    // Long streams hold every running slot (one per data-parallel replica) before the burst, so the
    // burst's first request waits and the rest find the queue full however slowly they arrive (a burst
    // alone raced the requests it sent: on a loaded CI machine each finished before the next came).
    const small = await startServer(['--max-num-seqs', '1', '--max-waiting', '1', '--max-model-len', '8192']);
    const holders = [];
    for (let i = 0; i < (tp2dp2 ? 2 : 1); i++) {
      const ac = new AbortController();
      const res = await fetch(small.base + '/v1/completions', {
        method: 'POST', signal: ac.signal,
        headers: { 'Content-Type': 'application/json', Authorization: 'Bearer secret' },
        body: JSON.stringify({ model: 'tiny', prompt: `Hold ${i}`, max_tokens: 8000, stream: true, ignore_eos: true }),
      });
      assert(res.status === 200, 'holding stream ' + res.status);
      await res.body.getReader().read();  // its first token: it is running
      holders.push(ac);
    }
    const c = new OpenAI({ baseURL: small.base + '/v1', apiKey: 'secret', maxRetries: 0 });
    let settled = 0;
    const burst = Array.from({ length: 12 }, async (_, i) => {
      try {
        await c.completions.create({ model: 'tiny', prompt: `Queue ${i}`, max_tokens: 40, ignore_eos: true });
        return 200;
      } catch (e) {
        return e.status;
      } finally {
        settled++;
      }
    });
    // All but the one waiting behind the holders are answered at once; then the holders let go.
    for (let t = 0; t < 200 && settled < 11; t++) await new Promise((r) => setTimeout(r, 50));
    for (const ac of holders) ac.abort();
    const statuses = await Promise.all(burst);
    for (const p of small.procs || [small.proc]) p.kill('SIGTERM');
    assert(statuses.includes(429), 'no 429 among ' + statuses);
    assert(statuses.includes(200), 'no success among ' + statuses);
    assert(statuses.every((s) => s === 200 || s === 429), 'statuses ' + statuses);
  });

  const failed = summary();
  for (const p of server.procs || [server.proc]) if (p.exitCode === null) p.kill('SIGKILL');
  fs.rmSync(dir, { recursive: true, force: true });
  process.exit(failed ? 1 : 0);
}

main().catch((e) => { console.log('FAIL setup: ' + (e.stack || e)); console.log('0 passed, 1 failed'); process.exit(1); });
