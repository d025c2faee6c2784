// The digits CSV of vtpu train mlp / fsdp (--data): load_digits_csv, plain or gzipped, then the
// fixed train/test split the trainers take.
#include "fuzz/fuzz_input.h"
#include "vtpu/train/digits_dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  const auto all = vtpu::fuzz::accept_or_refuse([&] { return vtpu::load_digits_csv(path); });
  if (!all) return 0;
  const vtpu::DigitsSplit split = vtpu::split_digits(*all);
  vtpu::fuzz::check(split.train.num_rows() + split.test.num_rows() == all->num_rows(),
                    "the split lost rows");
  return 0;
}
