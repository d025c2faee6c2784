#include "vtpu/stress/stress_workload.h"

#include <algorithm>
#include <random>

#include "vtpu/common/error.h"
#include "vtpu/common/strings.h"

namespace vtpu {
namespace {

class EventSink {
 public:
  explicit EventSink(int core) : core_(core) {}
  uint64_t alloc(uint64_t bytes, std::string label) {
    TraceEvent e;
    e.t_us = static_cast<double>(events_.size());
    e.core = core_;
    e.op = TraceOp::kAlloc;
    e.id = next_id_;
    e.bytes = std::max<uint64_t>(bytes, 1);
    e.label = std::move(label);
    events_.push_back(std::move(e));
    return next_id_++;
  }
  void free(uint64_t id) {
    TraceEvent e;
    e.t_us = static_cast<double>(events_.size());
    e.core = core_;
    e.op = TraceOp::kFree;
    e.id = id;
    events_.push_back(std::move(e));
  }
  size_t size() const { return events_.size(); }
  std::vector<TraceEvent> take() { return std::move(events_); }

 private:
  int core_;
  uint64_t next_id_ = 0;
  std::vector<TraceEvent> events_;
};

// `mean` scaled by a factor uniform in [1/2, 3/2) in steps of 1/1024 (integer arithmetic).
uint64_t jittered(std::mt19937_64& rng, uint64_t mean) {
  return std::max<uint64_t>(1, mean / 1024 * (512 + uniform_uint64(rng, 0, 1023)));
}

std::string layer_label(int l, const char* what) {
  return "layer" + std::to_string(l) + "/" + what;
}

std::vector<TraceEvent> training_steps(const StressWorkloadOptions& o, int core, bool variable) {
  std::mt19937_64 rng(stress_core_seed(o.seed, core));
  const int n = o.layers;
  std::vector<uint64_t> act(n), weight(n);
  for (int l = 0; l < n; ++l) {
    act[l] = jittered(rng, o.activation_bytes);
    weight[l] = jittered(rng, o.weight_bytes);
  }
  EventSink sink(core);
  for (int l = 0; l < n; ++l) sink.alloc(weight[l], layer_label(l, "weight"));
  for (int l = 0; l < n; ++l) sink.alloc(2 * weight[l], layer_label(l, "opt_state"));
  std::vector<uint64_t> act_id(n), grad_id(n);
  do {  // whole steps; make_stress_workload cuts the stream to events_per_core
    const uint64_t eighths =
        variable ? uniform_uint64(rng, static_cast<uint64_t>(o.min_batch_eighths), 8) : 8;
    auto scaled = [&](uint64_t bytes) { return std::max<uint64_t>(1, bytes / 8 * eighths); };
    for (int l = 0; l < n; ++l) {  // forward
      act_id[l] = sink.alloc(scaled(act[l]), layer_label(l, "act"));
      sink.free(sink.alloc(scaled(act[l] / 2), layer_label(l, "scratch")));
    }
    const uint64_t loss = sink.alloc(4096, "loss");
    uint64_t prev_act_grad = loss;
    for (int l = n - 1; l >= 0; --l) {  // backward
      grad_id[l] = sink.alloc(weight[l], layer_label(l, "grad"));
      const uint64_t act_grad = sink.alloc(scaled(act[l]), layer_label(l, "act_grad"));
      sink.free(prev_act_grad);
      sink.free(act_id[l]);
      prev_act_grad = act_grad;
    }
    sink.free(prev_act_grad);
    for (int l = 0; l < n; ++l) {  // optimizer
      sink.free(sink.alloc(weight[l], layer_label(l, "opt_tmp")));
      sink.free(grad_id[l]);
    }
  } while (sink.size() < o.events_per_core);
  return sink.take();
}

std::vector<TraceEvent> kv_cache(const StressWorkloadOptions& o, int core) {
  std::mt19937_64 rng(stress_core_seed(o.seed, core));
  EventSink sink(core);
  struct Request {
    uint64_t number;
    uint64_t id;
    uint64_t blocks;
    uint64_t target;
  };
  const auto max_blocks = static_cast<uint64_t>(o.max_blocks);
  uint64_t next_request = 0;
  auto start = [&]() {
    const uint64_t prompt = uniform_uint64(rng, 1, max_blocks / 4);
    const uint64_t target = uniform_uint64(rng, prompt + 1, max_blocks);
    const uint64_t number = next_request++;
    const uint64_t id =
        sink.alloc(prompt * o.kv_block_bytes, "request" + std::to_string(number) + "/kv");
    return Request{number, id, prompt, target};
  };
  std::vector<Request> live;
  for (int r = 0; r < o.max_requests; ++r) live.push_back(start());
  while (sink.size() < o.events_per_core) {
    Request& r = live[uniform_uint64(rng, 0, live.size() - 1)];
    ++r.blocks;
    const uint64_t grown =
        sink.alloc(r.blocks * o.kv_block_bytes, "request" + std::to_string(r.number) + "/kv");
    sink.free(r.id);
    r.id = grown;
    if (r.blocks >= r.target) {
      sink.free(r.id);
      r = start();
    }
  }
  return sink.take();
}

bool is_steady_state_workload(const std::string& name) {
  return name == "uniform" || name == "lognormal" || name == "bimodal";
}

}  // namespace

const std::vector<std::string>& stress_workload_names() {
  static const std::vector<std::string> names = {"uniform",       "lognormal",      "bimodal",
                                                 "training_step", "variable_batch", "kv_cache"};
  return names;
}

void StressWorkloadOptions::validate() const {
  const auto& names = stress_workload_names();
  if (std::find(names.begin(), names.end(), name) == names.end())
    throw InvalidArgumentError("unknown stress workload '" + name +
                               "' (expected one of: " + join(names, ", ") + ")");
  // Each message names the `vtpu stress` option a user typed and the field it sets: a bare field
  // name ("activation_bytes 512") does not tell the user which flag to change.
  auto require = [&](bool ok, const std::string& what) {
    if (!ok) throw InvalidArgumentError("stress workload " + name + ": " + what);
  };
  require(events_per_core >= 1 && events_per_core <= kMaxWorkloadEvents,
          "--events " + std::to_string(events_per_core) + " (events_per_core; expected 1.." +
              std::to_string(kMaxWorkloadEvents) + ")");
  if (is_steady_state_workload(name)) {
    require(live_buffers >= 1, "--live 0 (live_buffers; expected >= 1)");
    SizeOptions s = sizes;
    s.distribution = parse_size_distribution(name);
    s.validate();
  } else if (name == "kv_cache") {
    require(
        max_requests >= 1 && max_requests <= 1000000,
        "--max-requests " + std::to_string(max_requests) + " (max_requests; expected 1..1000000)");
    require(kv_block_bytes >= 1, "--kv-block-bytes 0 (kv_block_bytes; expected >= 1)");
    require(max_blocks >= 4 && max_blocks <= 1000000,
            "--max-blocks " + std::to_string(max_blocks) + " (max_blocks; expected 4..1000000)");
    require(kv_block_bytes <= (uint64_t{1} << 44) / static_cast<uint64_t>(max_blocks),
            "--kv-block-bytes " + std::to_string(kv_block_bytes) + " x --max-blocks " +
                std::to_string(max_blocks) +
                " is above 16 TiB (kv_block_bytes * max_blocks; expected at most 16 TiB)");
  } else {
    require(layers >= 1 && layers <= 100000,
            "--layers " + std::to_string(layers) + " (layers; expected 1..100000)");
    require(activation_bytes >= 1024 && activation_bytes <= (uint64_t{1} << 40),
            "--activation-bytes " + std::to_string(activation_bytes) +
                " (activation_bytes; expected 1 KiB..1 TiB)");
    require(weight_bytes >= 1024 && weight_bytes <= (uint64_t{1} << 40),
            "--weight-bytes " + std::to_string(weight_bytes) +
                " (weight_bytes; expected 1 KiB..1 TiB)");
    require(min_batch_eighths >= 1 && min_batch_eighths <= 8,
            "min_batch_eighths " + std::to_string(min_batch_eighths) +
                " (no vtpu stress option; expected 1..8)");
  }
}

uint64_t stress_setup_events(const StressWorkloadOptions& o) {
  if (is_steady_state_workload(o.name)) return o.live_buffers;
  if (o.name == "kv_cache") return static_cast<uint64_t>(std::max(o.max_requests, 0));
  return 2 * static_cast<uint64_t>(std::max(o.layers, 0));
}

std::string describe_stress_workload(const StressWorkloadOptions& o) {
  const std::string events = ", " + std::to_string(o.events_per_core) + " events per core";
  if (is_steady_state_workload(o.name)) {
    SizeOptions s = o.sizes;
    s.distribution = parse_size_distribution(o.name);
    // The fill is part of the stream; say how much of it is steady state.
    const uint64_t fill = std::min(o.live_buffers, o.events_per_core);
    return "steady state of " + std::to_string(o.live_buffers) + " live buffers, " +
           describe_sizes(s) + events + " (" + std::to_string(fill) + " fill the arena, " +
           std::to_string(o.events_per_core - fill) + " in the steady state)";
  }
  // The other workloads give their setup count too (the one `vtpu stress --events` must
  // exceed).
  const uint64_t setup = std::min(stress_setup_events(o), o.events_per_core);
  const std::string rest = std::to_string(o.events_per_core - setup);
  if (o.name == "kv_cache") {
    return "KV cache: " + std::to_string(o.max_requests) + " concurrent requests growing in " +
           format_bytes(o.kv_block_bytes) + " blocks up to " + std::to_string(o.max_blocks) +
           " blocks" + events + " (" + std::to_string(setup) + " setup: the first requests' " +
           "prompts; " + rest + " growing and replacing requests)";
  }
  std::string text = o.name + ": " + std::to_string(o.layers) + " layers, activations ~" +
                     format_bytes(o.activation_bytes) + ", weights ~" +
                     format_bytes(o.weight_bytes) + " per layer";
  if (o.name == "variable_batch")
    text += ", batch " + std::to_string(o.min_batch_eighths) + "/8..8/8 per step";
  return text + events + " (" + std::to_string(setup) + " setup: weights and optimizer state; " +
         rest + " in the steps)";
}

uint64_t stress_core_seed(uint64_t seed, int core) {
  uint64_t z = seed + static_cast<uint64_t>(core) * 0x9E3779B97F4A7C15ULL + 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;  // splitmix64 finaliser (Vigna)
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

std::vector<TraceEvent> make_stress_workload(const StressWorkloadOptions& o, int core) {
  o.validate();
  if (core < 0)
    throw InvalidArgumentError("stress workload on core " + std::to_string(core) +
                               " (expected >= 0)");
  std::vector<TraceEvent> events;
  if (o.name == "training_step") {
    events = training_steps(o, core, false);
  } else if (o.name == "variable_batch") {
    events = training_steps(o, core, true);
  } else if (o.name == "kv_cache") {
    events = kv_cache(o, core);
  } else {
    SteadyStateOptions s;
    s.sizes = o.sizes;
    s.sizes.distribution = parse_size_distribution(o.name);
    s.live_buffers = std::min(o.live_buffers, o.events_per_core);
    s.pairs = (o.events_per_core - s.live_buffers + 1) / 2;
    s.core = core;
    s.seed = stress_core_seed(o.seed, core);
    events = make_steady_state_workload(s);
  }
  // Every generator stops after the step (or tick, or pair) that reaches events_per_core; the
  // stream is cut there, so it has exactly events_per_core events. A prefix of a valid stream is
  // valid: buffers still live at the end are allowed.
  if (events.size() > o.events_per_core) events.resize(o.events_per_core);
  return events;
}

}  // namespace vtpu
