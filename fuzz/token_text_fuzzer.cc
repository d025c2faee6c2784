// The text file of vtpu train transformer (--data): load_token_text with the trainer's byte
// vocabulary and a short context.
#include "fuzz/fuzz_input.h"
#include "vtpu/train/transformer_trainer.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static vtpu::fuzz::InputFile file;
  const std::string& path = file.write(data, size);
  const auto text =
      vtpu::fuzz::accept_or_refuse([&] { return vtpu::load_token_text(path, 128, 8); });
  if (!text) return 0;
  vtpu::fuzz::check(text->vocab_used >= 1 && text->vocab_used <= 128, "vocab_used out of range");
  text->describe_mapped(128);
  return 0;
}
