#!/usr/bin/env node
// OpenPAI v1.8.0's protocol v2 submit pipeline as a test oracle.
//
// Runs rest-server's own `protocol.submit` middleware chain (verbatim copy under openpai/src:
// body -> protocolValidate (js-yaml safeLoad, ajv schema, cross-checks) -> protocolRender (<% %>)
// -> hived.validate when --hived) on each document, and prints one JSON line per document with what
// the REST server answered when the chain stopped (express's error handler in src/config/express.js:
// status = err.status || 500, body {code, message}; a code of undefined is left out of the JSON).
//
// Usage:
//   node validate.js [options] FILE_OR_DIR...   one document per file (*.yaml, *.yml, *.json in a dir)
//   node validate.js [options] --stdin          a JSON list on stdin; each item is a string (the body
//                                               text) or {"file": name, "text": "..."} or
//                                               {"file": name, "json": {...}} (an application/json body)
// Options:
//   --hived        also run the hived scheduler step (OpenPAI with LAUNCHER_SCHEDULER=hivedscheduler);
//                  SKUs from PAI_ORACLE_SKUS (default OpenPAI's test cluster: K80 = 1 GPU, 4 CPU, 8192 MB)
//   --json-body    send files as application/json (express's bodyParser.json() object), not text/yaml
//   --mask         add "masked": the text GET .../config answered (utils/protocolSecret.js mask)
//   --user NAME    the submitting user (hived's affinity group names only); default "oracle"
//
// A file's text is the request body as bodyParser.text({type: 'text/*'}) gave it: a string.
'use strict';

const fs = require('fs');
const path = require('path');

const argv = process.argv.slice(2);
const flag = (name) => {
  const i = argv.indexOf(name);
  if (i >= 0) argv.splice(i, 1);
  return i >= 0;
};
const option = (name, fallback) => {
  const i = argv.indexOf(name);
  if (i < 0) return fallback;
  const value = argv[i + 1];
  argv.splice(i, 2);
  return value;
};

const useHived = flag('--hived');
const jsonBody = flag('--json-body');
const withMask = flag('--mask');
const fromStdin = flag('--stdin');
const user = option('--user', 'oracle');
// launcher.js is read when the middleware is loaded: set the switch first.
process.env.PAI_ORACLE_HIVED = useHived ? 'true' : 'false';

require('./pai-alias');
const protocolMiddleware = require('@pai/middlewares/v2/protocol');
const protocolSecret = require('@pai/utils/protocolSecret');

// The stage each middleware of protocol.submit is (its index in the array).
const STAGES = ['body', 'validate', 'render', 'hived'];

const runChain = async (body) => {
  const req = { body, user: { username: user, admin: false } };
  const res = { locals: {} };
  const chain = protocolMiddleware.submit;
  for (let i = 0; i < chain.length; i += 1) {
    // express 4: a layer's synchronous throw and next(err) both reach the error handler.
    const err = await new Promise((resolve) => {
      try {
        chain[i](req, res, (e) => resolve(e || null));
      } catch (e) {
        resolve(e);
      }
    });
    if (err) return { err, stage: STAGES[i] };
  }
  return { protocol: res.locals.protocol };
};

const parseArray = (text) => {
  try {
    const value = JSON.parse(text);
    return Array.isArray(value) ? value : null;
  } catch (e) {
    return null;
  }
};

const stageOf = (err, stage) => {
  const schemaErrors = err.code === 'InvalidProtocolError' ? parseArray(err.message) : null;
  if (stage === 'validate') {
    if (err.name === 'YAMLException') return 'yaml';
    if (schemaErrors) return 'schema';
    if (err.code === 'InvalidProtocolError') return 'crosscheck';
    return 'validate-crash';
  }
  if (stage === 'hived') return schemaErrors ? 'hived-schema' : 'hived';
  return stage;
};

const verdict = async (file, body, text) => {
  const out = { file, valid: false, errors: [] };
  let result;
  try {
    result = await runChain(body);
  } catch (e) {
    result = { err: e, stage: 'oracle' };
  }
  if (result.err) {
    const err = result.err;
    out.stage = stageOf(err, result.stage);
    const schemaErrors = err.code === 'InvalidProtocolError' ? parseArray(err.message) : null;
    out.errors = schemaErrors || [String(err.message)];
    const answer = { code: err.code, message: err.message };
    out.http = { status: err.status || 500, body: JSON.parse(JSON.stringify(answer)) };
  } else {
    const p = result.protocol;
    out.valid = true;
    out.rendered = { entrypoints: {}, dockerImageAuths: {} };
    for (const role of Object.keys(p.taskRoles)) {
      out.rendered.entrypoints[role] = p.taskRoles[role].entrypoint;
    }
    for (const name of Object.keys(p.prerequisites.dockerimage)) {
      if (p.prerequisites.dockerimage[name].auth) {
        out.rendered.dockerImageAuths[name] = p.prerequisites.dockerimage[name].auth;
      }
    }
    if (useHived) {
      out.rendered.hivedPodSpecs = {};
      for (const role of Object.keys(p.taskRoles)) {
        out.rendered.hivedPodSpecs[role] = p.taskRoles[role].hivedPodSpec;
      }
    }
  }
  if (withMask && typeof text === 'string') {
    out.masked = protocolSecret.mask(text);
  }
  return out;
};

const listFiles = (target) => {
  if (fs.statSync(target).isDirectory()) {
    return fs
      .readdirSync(target)
      .filter((n) => /\.(ya?ml|json)$/.test(n) && !/^verdicts\.json$/.test(n))
      .sort()
      .map((n) => path.join(target, n));
  }
  return [target];
};

const documents = () => {
  if (fromStdin) {
    const items = JSON.parse(fs.readFileSync(0, 'utf8'));
    return items.map((item, i) => {
      if (typeof item === 'string') return { file: `stdin[${i}]`, body: item, text: item };
      const file = item.file || `stdin[${i}]`;
      if ('json' in item) return { file, body: item.json, text: null };
      return { file, body: item.text, text: item.text };
    });
  }
  const docs = [];
  for (const target of argv) {
    for (const file of listFiles(target)) {
      const text = fs.readFileSync(file, 'utf8');
      docs.push(jsonBody ? { file, body: JSON.parse(text), text: null } : { file, body: text, text });
    }
  }
  return docs;
};

const main = async () => {
  for (const doc of documents()) {
    process.stdout.write(`${JSON.stringify(await verdict(doc.file, doc.body, doc.text))}\n`);
  }
};

main().catch((e) => {
  process.stderr.write(`oracle failed: ${e.stack}\n`);
  process.exit(2);
});
