// Stand-in for rest-server's winston logger: the oracle's stdout carries verdicts only.
'use strict';

const quiet = () => {};
module.exports = { warn: quiet, info: quiet, error: quiet, debug: quiet };
