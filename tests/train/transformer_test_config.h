// What the transformer trainer tests share (transformer_test, multi_process_train_test): a short
// English text and a small model that trains on it in a few milliseconds per step.
#pragma once

#include <string>

#include "vtpu/train/transformer_trainer.h"

namespace vtpu::testing {

/// 160 lines of four English sentences.
inline std::string english_text() {
  std::string s;
  const char* lines[] = {"The quick brown fox jumps over the lazy dog.\n",
                         "A journey of a thousand miles begins with a single step.\n",
                         "To be or not to be, that is the question.\n",
                         "All that glitters is not gold; all who wander are not lost.\n"};
  for (int i = 0; i < 40; ++i) s += lines[i % 4];
  return s;
}

/// Vocab 128, context 16, d_model 16, 4 heads, 2 blocks, MLP hidden 32, batch 8, 6 steps, no
/// logging.
inline TransformerConfig small_config() {
  TransformerConfig c;
  c.context = 16;
  c.d_model = 16;
  c.heads = 4;
  c.layers = 2;
  c.hidden = 32;
  c.batch = 8;
  c.steps = 6;
  c.log_every = 0;
  return c;
}

}  // namespace vtpu::testing
