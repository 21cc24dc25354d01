// What the node end-to-end tests (apis_e2e, server_e2e, structured_e2e) share: named checks that
// record pass/fail and the closing "N passed, M failed" line, assertions that throw, the HTTP
// status an SDK call must fail with, and starting `kimi serve` on the tiny model on loopback.
// Plain node, no npm packages: each run.sh copies it next to the test's e2e.js in the work dir.
'use strict';
const { spawn, execFileSync } = require('child_process');
const fs = require('fs');
const path = require('path');
const net = require('net');

const results = [];

function assert(cond, msg) { if (!cond) throw new Error('assertion failed: ' + msg); }
function eq(a, b, msg) { assert(JSON.stringify(a) === JSON.stringify(b), `${msg}: ${JSON.stringify(a)} != ${JSON.stringify(b)}`); }

// Runs one named check; a throw marks it failed and the run goes on to the next.
async function check(name, fn) {
  const t0 = Date.now();
  try {
    await fn();
    results.push([name, true]);
    console.log(`ok   ${name} (${Date.now() - t0} ms)`);
  } catch (e) {
    results.push([name, false]);
    console.log(`FAIL ${name}: ${e.stack || e}`);
  }
}

// Prints "N passed, M failed" for the checks run so far and returns M.
function summary() {
  const failed = results.filter((r) => !r[1]).length;
  console.log(`${results.length - failed} passed, ${failed} failed`);
  return failed;
}

// The error of an SDK call that must fail with HTTP `status`.
async function expectStatus(promise, status) {
  try {
    await promise;
  } catch (e) {
    assert(e.status === status, `expected HTTP ${status}, got ${e.status}: ${e.message}`);
    return e;
  }
  throw new Error(`expected HTTP ${status}, got success`);
}

// `kimi serve DIR/tiny --host 127.0.0.1 --port 0 ARGS...` (the model made on first use), once it
// says which port it took; the server's stderr is kept for the error when it never starts.
async function startServer(kimi, dir, args) {
  const model = path.join(dir, 'tiny');
  if (!fs.existsSync(model)) execFileSync(kimi, ['make-model', model, '--preset', 'tiny']);
  return startProcess(kimi, ['serve', model, '--host', '127.0.0.1', '--port', '0', ...args]);
}

// `kimi ARGS...` (serve or proxy), once its start-up line names its port on 127.0.0.1.
async function startProcess(kimi, args) {
  const proc = spawn(kimi, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  let log = '';
  const port = await new Promise((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(args[0] + ' did not start: ' + log)), 60000);
    proc.stderr.on('data', (d) => {
      log += d.toString();
      const m = log.match(/on http:\/\/127\.0\.0\.1:(\d+)/);
      if (m) { clearTimeout(timer); resolve(Number(m[1])); }
    });
    proc.on('exit', (code) => reject(new Error(args[0] + ' exited with ' + code + ': ' + log)));
  });
  return { proc, port, base: `http://127.0.0.1:${port}`, log: () => log };
}

// A TCP port free on 127.0.0.1 now (for a flag that needs a fixed port, such as the rendezvous
// store's --data-parallel-rpc-port).
function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.on('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

module.exports = { results, assert, eq, check, summary, expectStatus, startServer, startProcess, freePort };
