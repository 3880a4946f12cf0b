//===- ReportHtml.cpp - the document, the summary and the mesh ------------===//

#include "tools/bmc/report/Html.h"
#include "tools/bmc/report/Sections.h"

#include "cost/Cluster.h"
#include "passes/plan/PlanOutput.h"

#include "llvm/Support/FormatVariadic.h"

using namespace bmc::report;
using namespace bm::plan;

namespace {

constexpr const char *kStyle = R"(
body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",Roboto,sans-serif;
  color:#222;margin:0 auto;max-width:1180px;padding:16px 24px}
h1{font-size:22px;margin:8px 0}h2{font-size:18px;margin:28px 0 8px;
  border-bottom:1px solid #ddd;padding-bottom:4px}
section{break-inside:avoid-page}
table{border-collapse:collapse;font-size:12.5px;margin:6px 0}
td,th{border-bottom:1px solid #eee;padding:3px 8px;text-align:left;
  vertical-align:top}
th{background:#f5f5f5}td.num,th.num{text-align:right;white-space:nowrap;
  font-variant-numeric:tabular-nums}
code,.mono{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:12px}
.kv{display:grid;grid-template-columns:repeat(auto-fill,minmax(210px,1fr));
  gap:6px 16px;margin:8px 0}
.kv div{background:#f7f7f9;border-radius:6px;padding:6px 10px}
.kv b{display:block;font-size:11px;color:#666;font-weight:600}
.copy{display:flex;gap:8px;align-items:flex-start;margin:6px 0}
.copy code{flex:1;background:#f7f7f9;padding:6px 8px;border-radius:4px;
  white-space:pre-wrap;word-break:break-all}
button{font:inherit;font-size:12px;padding:3px 10px;cursor:pointer}
svg{max-width:100%;height:auto;display:block;margin:6px 0}
.legend span{display:inline-block;margin-right:14px;font-size:12px}
.legend i{display:inline-block;width:11px;height:11px;margin-right:4px;
  vertical-align:-1px}
.note{color:#555;font-size:12.5px}
.scroll{max-height:520px;overflow:auto}
input[type=search]{font:inherit;padding:3px 6px;width:320px}
@media print{body{max-width:none;padding:0}button,input{display:none}
  .scroll{max-height:none;overflow:visible}}
)";

constexpr const char *kScript = R"(
function copyText(id){const t=document.getElementById(id).textContent;
  if(navigator.clipboard){navigator.clipboard.writeText(t).catch(()=>{});}}
function filterOps(box){const q=box.value.toLowerCase();
  document.querySelectorAll('#sharding tbody tr').forEach(r=>{
    r.style.display=r.textContent.toLowerCase().includes(q)?'':'none';});}
)";

void copyLine(llvm::raw_ostream &os, llvm::StringRef id, llvm::StringRef label,
              llvm::StringRef text) {
  os << "<div class=\"copy\"><b>" << escape(label) << "</b><code id=\"" << id
     << "\">" << escape(text) << "</code><button type=\"button\" "
     << "onclick=\"copyText('" << id << "')\">copy</button></div>\n";
}

void fact(llvm::raw_ostream &os, llvm::StringRef key, llvm::StringRef value) {
  os << "<div><b>" << escape(key) << "</b>" << escape(value) << "</div>";
}

} // namespace

void bmc::report::summarySection(const ReportInput &input,
                                 llvm::raw_ostream &os) {
  const Plan &plan = input.plan;
  const ParallelConfig &c = plan.config;
  const bool tokens = plan.sequenceLength > 1;
  os << "<section id=\"summary\"><h2>Summary</h2><div class=\"kv\">";
  fact(os, "model", plan.modelName);
  fact(os, "cluster", llvm::formatv("{0} GPUs of {1}", plan.gpus,
                                    plan.clusterName)
                          .str());
  fact(os, "global batch",
       tokens ? llvm::formatv("{0} x {1} tokens", plan.globalBatch,
                              plan.sequenceLength)
                    .str()
              : llvm::formatv("{0} samples", plan.globalBatch).str());
  fact(os, "mesh",
       llvm::formatv(
           "dp={0} x {4}tp={1}{5} x pp={2}{3}", c.dp, c.tp, c.pp,
           c.ep > 1 ? llvm::formatv(" (ep={0})", c.ep).str() : std::string(),
           c.cp > 1 ? llvm::formatv("cp={0} x ", c.cp).str() : std::string(),
           c.tp2 > 1 ? llvm::formatv(" x tp2={0}", c.tp2).str() : std::string())
           .str());
  fact(os, "schedule",
       llvm::formatv("{0}, {1} micro-batches of {2}{3}",
                     c.pp > 1 ? bmrt::toString(c.schedule) : "no pipeline",
                     c.numMicroBatches, c.microBatch,
                     c.chunks > 1 ? llvm::formatv(", v={0}", c.chunks).str()
                                  : std::string())
           .str());
  fact(os, "ZeRO, recompute",
       llvm::formatv("stage {0}, {1}", c.zeroStage, toString(c.recompute))
           .str());
  fact(os, "predicted step time", duration(plan.stepSeconds));
  fact(os, tokens ? "tokens per second" : "samples per second",
       llvm::formatv("{0:F0}", plan.tokensPerSecond).str());
  fact(os, "MFU", llvm::formatv("{0:F1}%", 100 * plan.mfu).str());
  if (plan.tpMostlyRepeats())
    fact(os, "GPUs with distinct work",
         llvm::formatv("about {0:F0} of {1}: tp={2} divides the compute "
                       "{3:F1} ways",
                       plan.distinctWorkGpus(), plan.gpus, plan.config.tp,
                       plan.tpComputeSplit)
             .str());
  fact(os, "memory per GPU (worst stage)",
       formatBytes(plan.memory.total()) + " of " +
           formatBytes(plan.deviceMemoryBytes));
  if (std::optional<OffloadSummary> offload = offloadOf(plan))
    fact(os, "optimizer offloaded to the host",
         llvm::formatv(
             "{0} of host memory per GPU; host link {1}, host "
             "step {2} a step{3}",
             formatBytes(offload->hostBytes), duration(offload->hostLink()),
             duration(offload->hostStep),
             offload->behind > 0 ? ", and " + duration(offload->behind) +
                                       " behind the next forward"
                                 : std::string())
             .str());
  os << "</div>\n";
  TimeBreakdown time = plan.items.empty() ? plan.time : timeOfItems(plan);
  os << timeSplitBar(time, plan.stepSeconds, 1000);
  copyLine(os, "fix-line", "--fix", c.str());
  llvm::Expected<std::string> megatron = exportMegatronArguments(plan);
  if (megatron)
    copyLine(os, "megatron-args", "--export megatron", *megatron);
  else
    os << "<p class=\"note\">Megatron-LM: "
       << escape(llvm::toString(megatron.takeError())) << "</p>";
  os << "</section>\n";
}

/// A rank's coordinates on the mesh.
struct RankCoordinates {
  int stage, dp, cp, tp2, tp;
};

/// Ranks are numbered tp innermost, then tp2, cp, dp, pp (PLAN_SCHEMA.md).
static RankCoordinates coordinates(const ParallelConfig &c, int rank) {
  const int cp = std::max(c.cp, 1), tp2 = std::max(c.tp2, 1);
  const int grid = c.tp * tp2;
  return {rank / (grid * cp * c.dp), (rank / (grid * cp)) % c.dp,
          (rank / grid) % cp, (rank / c.tp) % tp2, rank % c.tp};
}

void bmc::report::meshSection(const ReportInput &input,
                              llvm::raw_ostream &os) {
  const Plan &plan = input.plan;
  const ParallelConfig &c = plan.config;
  const int perNode = input.gpusPerNode > 0 ? input.gpusPerNode : 8;
  const int nodes = (plan.gpus + perNode - 1) / perNode;
  os << "<section id=\"mesh\"><h2>Mesh over the nodes</h2>";
  os << llvm::formatv("<p class=\"note\">{0} node{3} of {1} GPUs{2}. Colour: "
                      "pipeline stage; label: dp.tp coordinates. Ranks are "
                      "numbered tp innermost, then tp2 and cp (where the "
                      "plan has them), dp, pp.</p>",
                      nodes, perNode,
                      input.gpusPerNode > 0 ? ""
                                            : " (cluster unknown: 8 assumed)",
                      nodes == 1 ? "" : "s");
  // Nodes in a grid, each a row of GPU cells.
  const double cell = perNode <= 8 && nodes <= 16 ? 26 : 12, gap = 8;
  const double nodeW = perNode * cell + 8;
  const int perRow = std::max(1, static_cast<int>(1100 / (nodeW + gap)));
  const int rows = (nodes + perRow - 1) / perRow;
  Svg svg(perRow * (nodeW + gap), rows * (cell + 26) + 4,
          "GPUs of each node coloured by pipeline stage");
  for (int node = 0; node < nodes; ++node) {
    double x = (node % perRow) * (nodeW + gap);
    double y = (node / perRow) * (cell + 26);
    svg.rect(x, y, nodeW, cell + 22, "#f2f2f2",
             llvm::formatv("node {0}", node).str(), "node");
    svg.text(x + 4, y + 11, llvm::formatv("node {0}", node).str(), "start", 9,
             "#555");
    for (int g = 0; g < perNode && node * perNode + g < plan.gpus; ++g) {
      int rank = node * perNode + g;
      auto [stage, dp, cp, tp2, tp] = coordinates(c, rank);
      // The innermost ep of the dp ranks share an expert group.
      std::string expert =
          c.ep > 1 ? llvm::formatv(", ep {0}", dp % c.ep).str() : "";
      if (c.cp > 1)
        expert += llvm::formatv(", cp {0}", cp).str();
      if (c.tp2 > 1)
        expert += llvm::formatv(", tp2 {0}", tp2).str();
      svg.rect(x + 4 + g * cell, y + 15, cell - 2, cell - 2, palette(stage),
               llvm::formatv("rank {0}: pp stage {1}, dp {2}, tp {3}{4}",
                             rank, stage, dp, tp, expert)
                   .str(),
               "gpu");
      if (cell >= 20)
        svg.text(x + 4 + g * cell + (cell - 2) / 2, y + 15 + cell / 2 + 2,
                 llvm::formatv("{0}.{1}", dp, tp).str(), "middle", 8, "#fff");
    }
  }
  os << svg.str();
  // Which axis crosses the network, as the items' links say.
  os << "<table><tr><th>axis</th><th class=\"num\">size</th><th>link</th>"
        "</tr>";
  for (auto [axis, size] :
       {std::pair{kDataAxis, c.dp}, std::pair{kExpertAxis, c.ep},
        std::pair{kContextAxis, c.cp}, std::pair{kTensorAxis, c.tp},
        std::pair{kTensor2Axis, c.tp2}, std::pair{kPipelineAxis, c.pp}}) {
    if (listedOnlyWhenSplit(axis) && size == 1)
      continue;
    std::string link = size > 1 ? "" : "-";
    for (const CollectiveSummary &s : plan.collectives)
      if (s.axis == axis && (link.empty() || s.link == "network"))
        link = s.link;
    os << "<tr><td>" << axis << "</td><td class=\"num\">" << size
       << "</td><td>" << escape(link.empty() ? "-" : link) << "</td></tr>";
  }
  os << "</table></section>\n";
}

void bmc::report::printReportHtml(const ReportInput &input,
                                  llvm::raw_ostream &os) {
  const Plan &plan = input.plan;
  os << "<!DOCTYPE html>\n<html lang=\"en\"><head><meta charset=\"utf-8\">"
        "<meta name=\"viewport\" content=\"width=device-width, "
        "initial-scale=1\">"
     << "<title>bmc report: " << escape(plan.modelName) << " on " << plan.gpus
     << " GPUs</title><style>" << kStyle << "</style><script>" << kScript
     << "</script></head><body>\n";
  os << "<h1>" << escape(plan.modelName) << " on " << plan.gpus << " GPUs of "
     << escape(plan.clusterName) << "</h1><p class=\"note\">"
     << escape(input.planPath) << "</p>\n";
  summarySection(input, os);
  meshSection(input, os);
  timelineSection(plan, os);
  memorySection(plan, os);
  communicationSection(plan, os);
  shardingSection(plan, os);
  alternativesSection(plan, os);
  if (input.other)
    compareSection(input, os);
  if (!input.measured.empty())
    measuredSection(input, os);
  os << "</body></html>\n";
}
