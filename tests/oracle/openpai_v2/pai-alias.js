// Resolves OpenPAI's '@pai/...' requires (rest-server used module-alias: @pai -> src) for the verbatim
// copies under openpai/: a module with a stand-in under shims/ (cluster configuration, logger, HTTP
// client) resolves there, everything else to openpai/src/. Also stands in for 'axios', which only
// hived.js's best-effort VC lookup uses (it fails here, so hived.js takes its own fallback branch).
'use strict';

const fs = require('fs');
const path = require('path');
const Module = require('module');

const SHIMS = path.join(__dirname, 'shims');
const SRC = path.join(__dirname, 'openpai', 'src');

const originalResolve = Module._resolveFilename;
Module._resolveFilename = function resolve(request, parent, ...rest) {
  if (request === 'axios') {
    return originalResolve.call(this, path.join(SHIMS, 'axios.js'), parent, ...rest);
  }
  if (request.startsWith('@pai/')) {
    const sub = request.slice('@pai/'.length);
    const shim = path.join(SHIMS, sub.endsWith('.js') ? sub : `${sub}.js`);
    const target = fs.existsSync(shim) ? shim : path.join(SRC, sub);
    return originalResolve.call(this, target, parent, ...rest);
  }
  return originalResolve.call(this, request, parent, ...rest);
};
