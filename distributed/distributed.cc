#include "vtpu/distributed/distributed.h"

#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <mutex>

#include "vtpu/collectives/transport.h"
#include "vtpu/common/error.h"
#include "vtpu/distributed/mpi_context.h"
#include "vtpu/distributed/mpi_transport.h"

namespace vtpu::distributed {

namespace {

/// The processes of the MPI job, with an MPI transport for every communicator.
class MpiProcessGroup final : public ProcessGroup, public TransportProvider {
 public:
  explicit MpiProcessGroup(std::shared_ptr<MpiContext> context) : context_(std::move(context)) {}
  int process_index() const override { return context_->rank(); }
  int process_count() const override { return context_->size(); }

  std::vector<std::vector<std::byte>> all_gather(std::span<const std::byte> mine) override {
    std::lock_guard lock(host_mu_);
    const int n = context_->size();
    const long long my_size = static_cast<long long>(mine.size());
    std::vector<long long> sizes(static_cast<size_t>(n));
    check_mpi(MPI_Allgather(&my_size, 1, MPI_LONG_LONG, sizes.data(), 1, MPI_LONG_LONG,
                            context_->host()),
              "MPI_Allgather");
    std::vector<std::vector<std::byte>> all(static_cast<size_t>(n));
    // One broadcast per process keeps every count within an int for any size up to 2 GiB each.
    for (int p = 0; p < n; ++p) {
      auto& buf = all[static_cast<size_t>(p)];
      buf.resize(static_cast<size_t>(sizes[static_cast<size_t>(p)]));
      if (p == context_->rank()) std::copy(mine.begin(), mine.end(), buf.begin());
      broadcast(buf, p);
    }
    return all;
  }

  void barrier() override {
    std::lock_guard lock(host_mu_);
    check_mpi(MPI_Barrier(context_->host()), "MPI_Barrier");
  }
  void notify_failure(int core_id, const std::string& message) override {
    context_->notify_failure(core_id, message);
  }
  int add_failure_callback(FailureCallback callback) override {
    return context_->add_failure_callback(std::move(callback));
  }
  void remove_failure_callback(int id) override { context_->remove_failure_callback(id); }
  std::shared_ptr<Transport> make_transport(const Runtime& runtime,
                                            const std::vector<int>& group) override {
    return std::make_shared<MpiTransport>(context_, context_->next_communicator_id(group), group,
                                          runtime.local_num_cores());
  }

 private:
  void broadcast(std::vector<std::byte>& buf, int root) {
    constexpr size_t kChunk = size_t{1} << 30;
    for (size_t off = 0; off < buf.size() || off == 0; off += kChunk) {
      const int len = static_cast<int>(std::min(kChunk, buf.size() - off));
      check_mpi(MPI_Bcast(buf.data() + off, len, MPI_BYTE, root, context_->host()), "MPI_Bcast");
      if (buf.empty()) break;
    }
  }

  std::shared_ptr<MpiContext> context_;
  std::mutex host_mu_;
};

std::mutex g_mu;
std::shared_ptr<MpiContext> g_context;       // GUARDED_BY(g_mu)
std::shared_ptr<ProcessGroup> g_group;       // GUARDED_BY(g_mu)
bool g_finalized = false;                    // GUARDED_BY(g_mu)

}  // namespace

bool launched_by_mpi() {
  return std::getenv("OMPI_COMM_WORLD_SIZE") != nullptr || std::getenv("PMIX_RANK") != nullptr ||
         std::getenv("PMI_SIZE") != nullptr;
}

bool built_with_mpi() { return true; }

std::shared_ptr<ProcessGroup> initialize() {
  std::lock_guard lock(g_mu);
  if (g_group) return g_group;
  if (!launched_by_mpi()) {
    g_group = std::make_shared<SingleProcessGroup>();
    return g_group;
  }
  if (g_finalized) throw FailedPreconditionError("distributed::initialize after shutdown");
  int provided = 0;
  check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
  if (provided < MPI_THREAD_MULTIPLE) {
    MPI_Finalize();
    throw FailedPreconditionError(
        "the MPI library gives thread level " + std::to_string(provided) +
        " (expected MPI_THREAD_MULTIPLE: every virtual core calls MPI from its own thread)");
  }
  g_context = std::make_shared<MpiContext>();
  g_group = std::make_shared<MpiProcessGroup>(g_context);
  std::atexit([] { shutdown(); });
  return g_group;
}

std::unique_ptr<Runtime> make_runtime(RuntimeOptions options) {
  return std::make_unique<Runtime>(std::move(options), initialize());
}

int process_index() {
  std::lock_guard lock(g_mu);
  return g_group ? g_group->process_index() : 0;
}

int process_count() {
  std::lock_guard lock(g_mu);
  return g_group ? g_group->process_count() : 1;
}

void shutdown() {
  std::lock_guard lock(g_mu);
  if (!g_context || g_finalized) return;
  g_context->close();
  g_finalized = true;
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void abort_job(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  std::shared_ptr<MpiContext> context;
  {
    std::lock_guard lock(g_mu);
    context = g_context;
  }
  if (!context) std::exit(exit_code);
  MPI_Abort(MPI_COMM_WORLD, exit_code);
  std::_Exit(exit_code);  // MPI_Abort does not return; this is for the compiler
}

}  // namespace vtpu::distributed
