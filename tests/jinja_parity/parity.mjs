// Chat-template parity: renders every template in templates/ over every conversation in
// cases.json with @huggingface/jinja (the reference here) and with `kimi render-template`, and
// requires byte-identical output.
//
// usage: node parity.mjs KIMI_BINARY CASES_JSON TEMPLATE...   (run_parity.sh passes these)
//
// The real target is Python Jinja2 as Hugging Face runs it. Where @huggingface/jinja is known to
// differ from Jinja2, the cases and templates stay clear of the difference instead of bending our
// renderer towards the JavaScript behaviour:
//  - JavaScript has one number type, so a JSON float with an integral value (1.0) prints as "1"
//    (Python: "1.0"); the cases use no such floats.
//  - Printing None / True / False or a list/dict directly gives "" / "true" / JSON there, but
//    "None" / "True" / Python repr in Jinja2; the templates never print those values directly.
//  - `dict.items` without a call is the dict's key there but a method in Jinja2; the templates
//    index such keys (s['items']).
//  - JSON object keys that look like integers are reordered by JavaScript; the cases have none.
//  - `map('filter')` is not implemented there; the templates use loops instead.
// tojson itself agrees (json.dumps separators ", " / ": ", non-ASCII kept) for these inputs.
import { execFileSync } from "node:child_process";
import { readFileSync } from "node:fs";
import { basename } from "node:path";
import { Template } from "@huggingface/jinja";

const [kimi, casesPath, ...templates] = process.argv.slice(2);
if (!kimi || !casesPath || templates.length === 0) {
  console.error("usage: node parity.mjs KIMI_BINARY CASES_JSON TEMPLATE...");
  process.exit(2);
}
const cases = JSON.parse(readFileSync(casesPath, "utf8"));

// The context Hugging Face's apply_chat_template passes (tools=None and documents=None when absent).
function context(c) {
  return {
    messages: c.messages,
    tools: c.tools ?? null,
    documents: null,
    add_generation_prompt: c.add_generation_prompt ?? false,
    bos_token: c.bos_token ?? "",
    eos_token: c.eos_token ?? "",
    ...(c.kwargs ?? {}),
  };
}

function firstDifference(a, b) {
  let i = 0;
  while (i < a.length && i < b.length && a[i] === b[i]) i++;
  return i;
}

let failures = 0;
let compared = 0;
for (const path of templates) {
  const name = basename(path);
  const source = readFileSync(path, "utf8");
  const reference = new Template(source);
  const ours = JSON.parse(
    execFileSync(kimi, ["render-template", "--template", path, "--input", casesPath], {
      encoding: "utf8",
      maxBuffer: 64 << 20,
    }),
  );
  for (let i = 0; i < cases.length; i++) {
    const c = cases[i];
    const label = `${name} / ${c.name}`;
    let expected;
    try {
      expected = reference.render(context(c));
    } catch (e) {
      console.log(`FAIL ${label}: @huggingface/jinja failed: ${e.message}`);
      failures++;
      continue;
    }
    const got = ours[i];
    compared++;
    if (got.error !== undefined) {
      console.log(`FAIL ${label}: kimi failed: ${got.error}`);
      failures++;
    } else if (got.output !== expected) {
      const at = firstDifference(got.output, expected);
      console.log(`FAIL ${label}: outputs differ at character ${at}`);
      console.log(`  expected: ${JSON.stringify(expected.slice(Math.max(0, at - 40), at + 60))}`);
      console.log(`  kimi:     ${JSON.stringify(got.output.slice(Math.max(0, at - 40), at + 60))}`);
      failures++;
    } else {
      console.log(`ok   ${label} (${expected.length} chars)`);
    }
  }
}
console.log(`${compared - failures}/${compared} renders identical across ${templates.length} templates`);
process.exit(failures ? 1 : 0);
