#!/usr/bin/env node
// Regenerates tests/unit/protocol_v2_corpus/verdicts.json: validate.js over the whole corpus, once as
// OpenPAI without the hived scheduler and once with it (--hived), merged per file.
//   node tests/oracle/openpai_v2/make_verdicts.js [CORPUS_DIR]
'use strict';

const fs = require('fs');
const path = require('path');
const { execFileSync } = require('child_process');

const corpus = path.resolve(
  process.argv[2] || path.join(__dirname, '..', '..', 'unit', 'protocol_v2_corpus'),
);
const run = (...flags) =>
  execFileSync(process.execPath, [path.join(__dirname, 'validate.js'), ...flags, corpus], {
    encoding: 'utf8',
    maxBuffer: 64 * 1024 * 1024,
  })
    .trim()
    .split('\n')
    .map((line) => JSON.parse(line));

const plain = run('--mask');
const hived = run('--hived');
const verdicts = {};
let valid = 0;
plain.forEach((v, i) => {
  const name = path.basename(v.file);
  const text = fs.readFileSync(v.file, 'utf8');
  const entry = { valid: v.valid };
  if (!v.valid) {
    entry.stage = v.stage;
    entry.errors = v.errors;
    entry.http = v.http;
  } else {
    entry.rendered = v.rendered;
    valid += 1;
  }
  if (/secrets/.test(text)) entry.masked = v.masked;
  const h = hived[i];
  entry.hived = { valid: h.valid };
  if (!h.valid) {
    entry.hived.stage = h.stage;
    entry.hived.errors = h.errors;
    entry.hived.http = h.http;
  } else {
    entry.hived.hivedPodSpecs = h.rendered.hivedPodSpecs;
  }
  verdicts[name] = entry;
});

const pkg = require('./package.json');
const out = {
  oracle:
    'tests/oracle/openpai_v2: microsoft/pai@v1.8.0 (d60cba45000596841cc7f9cf392122be5ce504bb) ' +
    'src/rest-server protocol.submit middleware, verbatim, under ' +
    Object.entries(pkg.dependencies)
      .map(([n, v]) => `${n}@${v}`)
      .join(', '),
  command: 'node tests/oracle/openpai_v2/make_verdicts.js',
  notes: [
    'valid/stage/errors/http: OpenPAI without the hived scheduler (LAUNCHER_SCHEDULER default).',
    'hived: the same chain with hived.validate (LAUNCHER_SCHEDULER=hivedscheduler), SKUs of OpenPAI\'s ' +
      'test cluster (K80: 1 GPU, 4 CPU, 8192 MB), no hived scheduler reachable (quota unlimited).',
    'stage: yaml | schema | crosscheck | validate-crash | render | hived-schema | hived.',
    'http: what the REST server answered (express error handler: status, {code, message}); ' +
      '500s without a code are crashes of OpenPAI code (their wording follows the Node version).',
    'rendered.entrypoints: the command text (USER_CMD) per task role after <% %> rendering by rest-server; ' +
      '$secrets are left for the runtime.',
    'masked: what GET /api/v2/jobs/{job}/config stored (utils/protocolSecret.js mask) for documents mentioning secrets.',
    'Line numbers in YAML error messages count the "# source:" line each corpus file starts with.',
  ],
  counts: { documents: plain.length, valid, invalid: plain.length - valid },
  verdicts,
};
fs.writeFileSync(path.join(corpus, 'verdicts.json'), `${JSON.stringify(out, null, 2)}\n`);
process.stdout.write(`${plain.length} documents: ${valid} valid, ${plain.length - valid} invalid\n`);
