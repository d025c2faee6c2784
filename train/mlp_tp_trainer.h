// The one training loop of the digits MLP (train/mlp_trainer.h): Megatron tensor parallelism
// over T shards combined with data parallelism over D shards on a D x T layout. It is what
// `vtpu train mlp --plan PLAN.json` runs for the planner's tp(...) and dp(...)+tp(...)
// strategies, and with T = 1 it is train_mlp, plain data parallelism (the shard is then the whole
// model and no tensor all-reduce runs).
//
// Source: Shoeybi et al., "Megatron-LM: Training Multi-Billion Parameter Language Models Using
// Model Parallelism" (2019), Sec. 3 and Fig. 3a: the MLP block Y = relu(X A) B with A split by
// columns and B by rows.
//
// Layout over T tensor shards (H hidden units, Hs = H / T; T must divide H), shard t holds
//     W1[:, t*Hs:(t+1)*Hs]   (64 x Hs)   column-parallel first dense   P(None, 'model')
//     b1[t*Hs:(t+1)*Hs]      (Hs)                                      P('model')
//     W2[t*Hs:(t+1)*Hs, :]   (Hs x 10)   row-parallel second dense     P('model', None)
//     b2                     (10)        replicated, added once after the all-reduce
// as one flat vector [W1_t, b1_t, W2_t, b2] (75 Hs + 10 floats; MlpLayout{Hs} of
// train/mlp_layout.h).
//
// One step on the core of data shard d and tensor shard t (b = global batch / D rows of the
// global batch, as train_mlp splits it; with micro_batches = K the forward and backward below run
// K times on b / K rows each, the gradients accumulated in micro-batch order as train_mlp does):
//     forward    z1 = x W1_t + b1_t; a1 = relu(z1)           local, (b x Hs)
//                partial = a1 W2_t                            (b x 10), a partial sum over t
//                logits = psum(partial, 'model') + b2         Megatron's g: 1 all-reduce over
//                                                             the tensor group (none for T = 1)
//                softmax cross-entropy                        the same on every tensor shard
//     backward   dZ2 = (P - Y) / B; dW2_t = a1^T dZ2; db2 = colsum(dZ2)
//                dA1 = dZ2 W2_t^T; dZ1 = dA1 * (z1 > 0); dW1_t = x^T dZ1; db1_t = colsum(dZ1)
//                all local: Megatron's f (the all-reduce of the block's input gradient
//                dX = dZ1 W1_t^T) is not run, because X is the data and needs no gradient
//                (as autograd skips a leaf that does not require grad)
//     data       one psum over 'data' (the data group) of the bucket [dW1_t, db1_t, dW2_t, db2,
//                loss sum] (as train_mlp's DDP bucket; none for D = 1: a group of one core)
//     optimizer  on the shard: SGD, or Adam (train/adam.h) with its moments m and v shaped
//                like the shard; every core of a data group applies identical sums.
// Every tensor shard computes the same dZ2, so b2, its gradient and (Adam) its moments stay
// identical across the tensor group without communication; Adam is elementwise, so updating the
// shards is updating the whole vector. The losses equal the single-core run's up to f32
// summation order (the logits are summed over T partial products, and the gradients over D
// shards); with T = 1 they are train_mlp's exactly.
//
// The run is one shard_map (sharding/shard_map.h) over the layout as a (D, T) mesh with axes
// 'data' and 'model', the core of data shard d and tensor shard t at (d, t): its groups over
// each axis are the layout's data and tensor groups with the same ranks, so the named psums fold
// the same sums in the same order. Its function runs every step on one core; it takes the
// replicated training rows (P()) and returns the core's parameter shard and last gradient bucket
// (P(('data', 'model')): every core's block, compared for the replica check).
//
// HBM per core, each tensor charged its padded bytes (CoreContext::allocate_arrays), allocated
// once in this order: mlp/params (the shard), mlp/grads+loss,
// mlp/micro_grads+loss (K > 1), mlp/opt_state.exp_avg and .exp_avg_sq (Adam), then the batch and
// activations of MlpStepBuffers (train/mlp_trainer.h) with Hs hidden units, after the
// replicated training set (mlp/train_pixels, mlp/train_labels).
#pragma once

#include <cstdint>
#include <functional>
#include <nlohmann/json_fwd.hpp>
#include <vector>

#include "vtpu/collectives/communicator.h"
#include "vtpu/runtime/runtime.h"
#include "vtpu/sharding/data_tensor_layout.h"
#include "vtpu/train/digits_dataset.h"
#include "vtpu/train/mlp_trainer.h"

namespace vtpu {

/// What a tensor-parallel run produced. Plain data, thread-compatible.
struct MlpTensorParallelResult {
  /// Losses, step times, accuracies, HBM per core, and the final parameters gathered into the
  /// flat [W1, b1, W2, b2] of train_mlp; all_reduce: the gradient psum over 'data' per core
  /// (0 calls for D = 1);
  /// replica_mismatch: the first core whose shard differs from its data shard 0's, or whose b2
  /// differs from tensor shard 0's, bitwise (nullopt when none does).
  MlpResult run;
  int64_t data = 1, tensor = 1;                    // D and T
  int64_t shard_parameters = 0;                    // floats of one core's shard
  std::vector<CollectiveStats> tensor_all_reduce;  // per core, psums over 'model' (0 for T = 1)
};
void to_json(nlohmann::json& j, const MlpTensorParallelResult& r);

/// Elements of one tensor shard of the 64 -> hidden -> 10 MLP: 75 * hidden / tensor + 10.
/// Throws InvalidArgumentError when tensor does not divide hidden.
int64_t mlp_tp_shard_parameters(int64_t hidden, int64_t tensor);

/// Shard `rank` of `tensor` of the flat parameters [W1, b1, W2, b2] (layout above). Throws
/// InvalidArgumentError for a size mismatch or a rank out of range. Thread-safe.
std::vector<float> mlp_tp_shard(const std::vector<float>& full, int64_t hidden, int64_t tensor,
                                int64_t rank);

/// Trains on `split.train` over `layout` (it must use every core of `runtime`), evaluates on
/// `split.test`. Every MlpConfig field applies: the global batch splits over the D data shards
/// (and their micro-batches), config.kernels "pallas" needs T = 1, and config.at_peak is called
/// as train_mlp calls it. Calls on_log(step, loss) on core 0 every config.log_every steps. Throws
/// InvalidArgumentError for a bad config, a layout of another core count, or T not dividing
/// config.hidden; UnimplementedError for kernels "pallas" with T > 1; OutOfMemoryError when a
/// buffer does not fit; FailedPreconditionError when the loss diverges.
MlpTensorParallelResult train_mlp_tensor_parallel(
    Runtime& runtime, const DigitsSplit& split, const MlpConfig& config,
    const DataTensorLayout& layout,
    const std::function<void(int64_t step, double loss)>& on_log = {});

}  // namespace vtpu
