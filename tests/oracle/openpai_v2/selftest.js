#!/usr/bin/env node
// Runs OpenPAI's own unit tests of the protocol (verbatim copies: openpai/test/v2/protocol.js and
// openpai/test/protocolSecret.js) against the copied sources and pinned packages, with a tiny
// describe/it runner in place of mocha and chai's expect as their test/setup.js made it global.
// Exit status 0 when every case passes: the oracle runs OpenPAI's code as OpenPAI's suite did.
'use strict';

process.env.PAI_ORACLE_HIVED = 'true'; // their test/setup.js: LAUNCHER_SCHEDULER=hivedscheduler
require('./pai-alias');
const chai = require('chai');

global.expect = chai.expect;
const cases = [];
global.describe = (name, body) => body();
global.it = (name, body) => cases.push({ name, body });

require('./openpai/test/v2/protocol.js');
require('./openpai/test/protocolSecret.js');

let failed = 0;
for (const c of cases) {
  try {
    c.body();
    process.stdout.write(`ok   ${c.name}\n`);
  } catch (e) {
    failed += 1;
    process.stdout.write(`FAIL ${c.name}: ${e.message}\n`);
  }
}
process.stdout.write(`${cases.length - failed}/${cases.length} of OpenPAI's protocol tests pass\n`);
process.exit(failed ? 1 : 0);
