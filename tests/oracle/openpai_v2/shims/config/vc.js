// Stand-in for rest-server src/config/vc.js: only `resourceUnits`, the cluster's SKU types, which
// OpenPAI read from the hived scheduler's config (physicalCluster.skuTypes; memory in MB).
// Default: OpenPAI's own test cluster (src/rest-server/test/data/hivedscheduler.yaml: one SKU "K80",
// 1 GPU, 4 CPUs, 8192Mi). Override with PAI_ORACLE_SKUS='{"name": {"gpu": 1, "cpu": 4, "memory": 8192}}'.
'use strict';

const resourceUnits = process.env.PAI_ORACLE_SKUS
  ? JSON.parse(process.env.PAI_ORACLE_SKUS)
  : { K80: { gpu: 1, cpu: 4, memory: 8192 } };

module.exports = { resourceUnits };
