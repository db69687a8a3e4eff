#!/usr/bin/env node
/* validate.js -- check an OpenAPI document with @seriousme/openapi-schema-validator
 * (the OpenAPI 3.1 JSON Schema), resolve every $ref, and compile every schema of it
 * with Ajv's JSON Schema 2020-12 dialect (the one OpenAPI 3.1 uses), so that a typo in
 * a schema keyword fails too. tests/it_api_contract.c runs it on the document the
 * service serves; by hand:
 *
 *   npm ci --prefix tests/openapi && node tests/openapi/validate.js FILE [SCHEMA=BODY...]
 *
 * Each SCHEMA=BODY names a schema of components/schemas and a file holding a body the
 * service answered: the body must be valid against that schema (so the document
 * describes what the service really sends).
 *
 * Prints "ok ..." lines, or the errors; exit 0 when valid, 1 when not, 2 on bad usage.
 */
"use strict";

const fs = require("fs");

async function main() {
  const [file, ...bodies] = process.argv.slice(2);
  if (!file || bodies.some((b) => !/^[A-Za-z]+=./.test(b))) {
    console.error("usage: validate.js OPENAPI.json [SCHEMA=BODY.json...]");
    return 2;
  }
  const doc = JSON.parse(fs.readFileSync(file, "utf8"));
  const { Validator } = await import("@seriousme/openapi-schema-validator");
  const validator = new Validator();
  const res = await validator.validate(doc);
  if (!res.valid) {
    console.error("not ok: the document does not match the OpenAPI schema");
    console.error(JSON.stringify(res.errors, null, 2));
    return 1;
  }
  if (validator.version !== "3.1") {
    console.error(`not ok: OpenAPI ${validator.version}, expected 3.1`);
    return 1;
  }
  console.log(`ok: valid OpenAPI ${validator.version}`);
  try {
    validator.resolveRefs();
  } catch (e) {
    console.error(`not ok: a $ref does not resolve: ${e.message}`);
    return 1;
  }
  console.log("ok: every $ref resolves");

  /* Every schema, compiled on its own with the document's components beside it. */
  const Ajv2020 = require("ajv/dist/2020").default;
  const ajv = new Ajv2020({ strict: true, allErrors: true });
  require("ajv-formats").default(ajv);
  ajv.addVocabulary(["example", "discriminator", "xml", "externalDocs"]);
  const root = { $id: "openapi:doc", components: doc.components };
  ajv.addSchema(root);
  let bad = 0;
  const seen = new Set(); /* each distinct schema once: most are the same $ref */
  const check = (where, schema, once = true) => {
    const key = JSON.stringify(schema);
    if (once && seen.has(key)) return;
    seen.add(key);
    try {
      ajv.compile({ $id: `openapi:${where}`, ...rebase(schema) });
    } catch (e) {
      console.error(`not ok: schema at ${where}: ${e.message}`);
      bad++;
    }
  };
  for (const [name, s] of Object.entries(doc.components?.schemas ?? {}))
    check(`components/schemas/${name}`, s, false);
  for (const [p, item] of Object.entries(doc.paths ?? {}))
    for (const [m, op] of Object.entries(item)) {
      if (typeof op !== "object" || !op.responses) continue;
      for (const [st, r] of Object.entries(op.responses))
        for (const [ct, media] of Object.entries(r.content ?? {}))
          if (media.schema) check(`${m} ${p} ${st} ${ct}`, media.schema);
      for (const [ct, media] of Object.entries(op.requestBody?.content ?? {}))
        if (media.schema) check(`${m} ${p} body ${ct}`, media.schema);
    }
  if (bad) return 1;
  console.log("ok: every schema compiles as JSON Schema 2020-12");

  for (const arg of bodies) {
    const [name, path] = [arg.slice(0, arg.indexOf("=")), arg.slice(arg.indexOf("=") + 1)];
    const validate = ajv.getSchema(`openapi:components/schemas/${name}`);
    if (!validate) {
      console.error(`not ok: no schema ${name}`);
      bad++;
      continue;
    }
    const body = JSON.parse(fs.readFileSync(path, "utf8"));
    if (validate(body)) {
      console.log(`ok: a real ${name} body is valid`);
    } else {
      console.error(`not ok: a real ${name} body is not valid: ${ajv.errorsText(validate.errors)}`);
      console.error(JSON.stringify(body).slice(0, 400));
      bad++;
    }
  }
  return bad ? 1 : 0;
}

/* Point "#/components/..." references at the document added under openapi:doc. */
function rebase(v) {
  if (Array.isArray(v)) return v.map(rebase);
  if (v === null || typeof v !== "object") return v;
  const out = {};
  for (const [k, x] of Object.entries(v))
    out[k] = k === "$ref" && typeof x === "string" && x.startsWith("#/") ? `openapi:doc${x}` : rebase(x);
  return out;
}

main().then(
  (rc) => process.exit(rc),
  (e) => {
    console.error(`not ok: ${e.stack || e}`);
    process.exit(1);
  },
);
