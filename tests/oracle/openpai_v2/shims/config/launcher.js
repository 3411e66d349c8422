// Stand-in for rest-server src/config/launcher.js (read from the deployment's environment there).
// Only what the protocol and hived middlewares read: whether the hived scheduler step runs
// (LAUNCHER_SCHEDULER === 'hivedscheduler' in OpenPAI; PAI_ORACLE_HIVED=true here) and its address.
'use strict';

module.exports = {
  enabledHived: process.env.PAI_ORACLE_HIVED === 'true',
  hivedWebserviceUri: 'http://hived.oracle.invalid',
};
