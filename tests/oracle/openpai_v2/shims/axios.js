// Stand-in for axios: the oracle has no hived scheduler to ask. hived.js's getCellStatus() then logs a
// warning and falls back to "quota unlimited, every SKU of the cluster allowed", its own error branch.
'use strict';

const unreachable = () => Promise.reject(new Error('oracle: no hived scheduler to inspect'));
module.exports = unreachable;
module.exports.get = unreachable;
