// training_sequence.h - synthetic allocation sequences of transformer training, the way
// PyTorch with its caching allocator off makes them (every tensor one cudaMalloc of its
// exact size): parameters and optimizer state that live for the run, and per step a batch
// of B sequences of length L drawn at random, so each step's activation sizes differ, as
// in real training with variable batches. For the placement checks (docs/placement.md):
// a policy is measured on these as well as on the recorded torch_train sequence, so that it
// is not tuned to one file.
//
// The model of a step, per layer of a pre-LayerNorm transformer (GPT-2 / BERT shapes):
// layer norm (fp32 output, mean and rstd saved), under autocast a bf16 copy of each linear
// layer's input (saved) and of its weight (kept until the forward ends, autocast's cache),
// the qkv projection, attention (fused: output and log-sum-exp saved; eager: the L x L
// scores, softmax and dropout mask saved), the output projection, dropout (mask saved) and
// the residual add (fp32); the MLP (fc1, GELU, fc2) likewise. Then the LM head (logits in
// bf16 and fp32, the shifted copy, log-softmax saved). Backward frees the saved tensors in
// reverse, making each op's input gradient and, the first time a parameter is reached in
// a step, its fp32 gradient (zero_grad(set_to_none) frees them after the optimizer).
// AdamW (foreach): exp_avg and exp_avg_sq made at the first step; two temporaries per
// parameter each step. Deterministic for a given seed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "simulate/sim_sequence.h"

namespace luma::testing {

struct TrainingModel {
  std::string name;
  unsigned layers = 4;
  std::uint64_t d_model = 256;
  unsigned heads = 4;
  std::uint64_t ffn = 1024;
  std::uint64_t vocab = 0;      // 0: a small classification head instead of an LM head
  std::uint64_t classes = 64;
  bool autocast = false;        // bf16 autocast (weights cast per forward) or fp32
  bool eager_attention = false; // L x L scores saved (else a fused kernel)
  std::vector<std::uint64_t> batches;
  std::vector<std::uint64_t> lengths;
  unsigned steps = 100;
  std::uint64_t seed = 1;
};

class TrainingSequence {
 public:
  explicit TrainingSequence(const TrainingModel& m) : m_(m), rng_(m.seed) {}

  core::SimSequence make() {
    const std::uint64_t d = m_.d_model;
    // Parameters (fp32, live for the run): embedding (tied LM head) or input projection,
    // per layer ln1, qkv, proj, ln2, fc1, fc2 (weights and biases), final ln, head.
    std::vector<std::uint64_t> param_bytes;
    auto param = [&](std::uint64_t elems) {
      param_bytes.push_back(elems * 4);
      params_.push_back(alloc(elems * 4));
    };
    const std::uint64_t max_len = *std::max_element(m_.lengths.begin(), m_.lengths.end());
    param(m_.vocab != 0 ? m_.vocab * d : 64 * d);  // token embedding or input projection
    param(max_len * d);                             // positions
    for (unsigned l = 0; l < m_.layers; ++l) {
      param(d), param(d), param(d * 3 * d), param(3 * d), param(d * d), param(d);
      param(d), param(d), param(d * m_.ffn), param(m_.ffn), param(m_.ffn * d), param(d);
    }
    param(d), param(d);
    if (m_.vocab == 0) param(d * m_.classes), param(m_.classes);
    for (unsigned step = 0; step < m_.steps; ++step) {
      const std::uint64_t b = m_.batches[rng_() % m_.batches.size()];
      const std::uint64_t len = m_.lengths[rng_() % m_.lengths.size()];
      one_step(b, len, param_bytes, step == 0);
    }
    core::finish_sim_sequence(s_);
    return s_;
  }

 private:
  using Id = std::uint32_t;

  Id alloc(std::uint64_t bytes) {
    const auto id = static_cast<Id>(next_id_++);
    s_.ops.push_back({clock(), bytes, id, false});
    bytes_.push_back(bytes);
    return id;
  }
  void free(Id id) { s_.ops.push_back({clock(), 0, id, true}); }
  std::uint64_t clock() { return t_ += 2000; }  // 2 us per call: a plausible eager-mode pace

  void one_step(std::uint64_t b, std::uint64_t len, const std::vector<std::uint64_t>& param_bytes, bool first) {
    const std::uint64_t d = m_.d_model, t = b * len, h = m_.heads;
    const std::uint64_t act = m_.autocast ? 2 : 4;  // bytes per element of a linear's output
    std::vector<Id> saved;        // freed in reverse order by backward
    std::vector<Id> weight_casts;  // autocast's cache, freed when the forward ends
    const Id ids = alloc(t * 8), labels = alloc(m_.vocab != 0 ? t * 8 : b * 8);
    auto save = [&](std::uint64_t bytes) { saved.push_back(alloc(bytes)); };
    auto temp = [&](std::uint64_t bytes, auto&& use) {
      const Id x = alloc(bytes);
      use();
      free(x);
    };
    auto linear = [&](std::uint64_t in_elems, std::uint64_t weight_elems) {
      if (m_.autocast) {
        save(in_elems * 2);                        // the input, cast to bf16
        weight_casts.push_back(alloc(weight_elems * 2));
      }
    };
    save(t * d * 4);  // embeddings + positions: the residual stream
    for (unsigned l = 0; l < m_.layers; ++l) {
      save(t * d * 4), save(t * 4), save(t * 4);  // ln1 out, mean, rstd
      linear(t * d, d * 3 * d);
      save(t * 3 * d * act);  // qkv
      if (m_.eager_attention) {
        save(b * h * len * len * act);  // scores
        save(b * h * len * len * act);  // softmax
        save(b * h * len * len);        // dropout mask
        temp(b * h * len * len * act, [] {});  // dropout output, consumed by the matmul
      } else {
        save(b * h * len * 4);  // log-sum-exp
      }
      save(t * d * act);  // attention output, heads merged (contiguous)
      linear(t * d, d * d);
      temp(t * d * act, [&] {  // projection output -> dropout
        save(t * d);           // dropout mask
        temp(t * d * act, [&] { save(t * d * 4); });  // dropout output -> residual add
      });
      save(t * d * 4), save(t * 4), save(t * 4);  // ln2
      linear(t * d, d * m_.ffn);
      save(t * m_.ffn * act);  // fc1 out
      save(t * m_.ffn * act);  // GELU out (fc2's input)
      linear(t * m_.ffn, m_.ffn * d);
      temp(t * d * act, [&] {
        save(t * d);
        temp(t * d * act, [&] { save(t * d * 4); });
      });
    }
    save(t * d * 4), save(t * 4), save(t * 4);  // final ln
    Id loss = 0;
    if (m_.vocab != 0) {
      const std::uint64_t v = m_.vocab;
      linear(t * d, v * d);
      temp(t * v * act, [&] {  // logits -> fp32 -> shifted copy -> log-softmax (saved)
        temp(t * v * 4, [&] {
          temp((t - b) * v * 4, [&] { save((t - b) * v * 4); });
        });
      });
    } else {
      save(b * d * 4);  // pooled
      linear(b * d, d * m_.classes);
      save(b * m_.classes * 4);
    }
    loss = alloc(4);
    for (Id w : weight_casts) free(w);  // autocast's cache cleared at the end of the forward
    weight_casts.clear();

    // Backward: gradients flow from the loss; each saved tensor is freed when the op that
    // saved it is reached, after its input gradient is made; the parameters' fp32
    // gradients are made as backward reaches them (the last layers' first).
    if (first) grads_.assign(params_.size(), 0);
    std::size_t next_param = params_.size();
    Id grad = alloc(m_.vocab != 0 ? (t - b) * m_.vocab * 4 : b * m_.classes * 4);
    std::size_t per_param = saved.size() / std::max<std::size_t>(1, params_.size());
    std::size_t since = 0;
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      const std::uint64_t bytes = bytes_of(*it);
      const Id g = alloc(bytes);  // the gradient of this op's input, the size of what it saved
      free(grad);
      free(*it);
      grad = g;
      if (++since >= per_param && next_param > 0) {
        since = 0;
        --next_param;
        if (m_.autocast) temp(param_bytes[next_param] / 2, [] {});  // bf16 weight gradient
        grads_[next_param] = alloc(param_bytes[next_param]);
      }
    }
    while (next_param > 0) {
      --next_param;
      grads_[next_param] = alloc(param_bytes[next_param]);
    }
    free(grad);
    free(loss);

    // AdamW, foreach: state at the first step, then two temporaries per parameter.
    if (first)
      for (std::size_t i = 0; i < params_.size(); ++i) {
        state_.push_back(alloc(param_bytes[i]));
        state_.push_back(alloc(param_bytes[i]));
      }
    std::vector<Id> tmp;
    for (std::size_t i = 0; i < params_.size(); ++i) tmp.push_back(alloc(param_bytes[i]));
    for (std::size_t i = 0; i < params_.size(); ++i) tmp.push_back(alloc(param_bytes[i]));
    for (Id x : tmp) free(x);
    for (Id g : grads_) free(g);  // zero_grad(set_to_none=True)
    free(labels);
    free(ids);
  }

  std::uint64_t bytes_of(Id id) const { return bytes_[id]; }

  TrainingModel m_;
  std::mt19937_64 rng_;
  core::SimSequence s_;
  std::uint64_t next_id_ = 0;
  std::uint64_t t_ = 0;
  std::vector<Id> params_, grads_, state_;
  std::vector<std::uint64_t> bytes_;  // per id
};

// The synthetic runs of the placement checks: a GPT-2-like LM fine-tuning step (bf16
// autocast, fused attention, vocabulary 50257, batch 2-16 x length 32-1024: the shapes of
// the kept-back GPT-2 sequence, docs/placement.md), a BERT-like encoder with eager
// attention (L x L tensors), a small fp32 classifier with other batch and length sets, and
// GPT-2 small at full size (19 GB live, 147 MiB first allocations).
inline std::vector<TrainingModel> training_models() {
  TrainingModel gpt2;
  gpt2.name = "gpt2-like";
  gpt2.layers = 8, gpt2.d_model = 1024, gpt2.heads = 16, gpt2.ffn = 4096, gpt2.vocab = 50257;
  gpt2.autocast = true;
  gpt2.batches = {2, 4, 8, 16};
  gpt2.lengths = {32, 64, 128, 256, 512, 1024};
  gpt2.steps = 40;
  gpt2.seed = 11;
  TrainingModel bert;
  bert.name = "bert-like";
  bert.layers = 6, bert.d_model = 512, bert.heads = 8, bert.ffn = 2048, bert.vocab = 30522;
  bert.autocast = true;
  bert.eager_attention = true;
  bert.batches = {8, 16, 24, 32};
  bert.lengths = {64, 128, 192, 256, 384, 512};
  bert.steps = 60;
  bert.seed = 12;
  TrainingModel small;
  small.name = "classifier-fp32";
  small.layers = 6, small.d_model = 384, small.heads = 6, small.ffn = 1536;
  small.batches = {6, 10, 20, 28, 40};
  small.lengths = {40, 80, 120, 200, 300};
  small.steps = 120;
  small.seed = 13;
  // GPT-2 small (124M parameters) fine-tuned at its full size: the shape of the kept-back
  // GPT-2 run - first allocations of 100+ MiB (the token embedding, 147 MiB, and its Adam
  // state), some 19 GB live at the peak (the LM head's logits at batch 16 x 1024 are
  // 1.6-3.3 GB each).
  TrainingModel gpt2_size;
  gpt2_size.name = "gpt2-size";
  gpt2_size.layers = 12, gpt2_size.d_model = 768, gpt2_size.heads = 12, gpt2_size.ffn = 3072;
  gpt2_size.vocab = 50257;
  gpt2_size.autocast = true;
  gpt2_size.batches = {4, 8, 12, 16};
  gpt2_size.lengths = {256, 512, 768, 1024};
  gpt2_size.steps = 30;
  gpt2_size.seed = 14;
  return {gpt2, bert, small, gpt2_size};
}

// The backward pass of each step, as PyTorch's autograd engine runs it on a device thread of
// its own (write_sequences.cpp says how it is found): each op's thread, 1 or 2; empty when
// the sequence has no 4-byte loss to find the backward by.
inline constexpr std::uint64_t kLossBytes = 4;

// Thread of each op: 1, or 2 for the backward passes (the rule above). Empty when the
// sequence has no loss to find the backward by.
inline std::vector<int> backward_on_thread_2(const core::SimSequence& s) {
  std::vector<int> thread(s.ops.size(), 1);
  std::vector<bool> is_loss(s.allocations, false);
  bool found = false;
  bool after_loss = false;  // between a loss's allocation and the next allocation
  bool backward = false;
  for (std::size_t i = 0; i < s.ops.size(); ++i) {
    const core::SimOp& op = s.ops[i];
    if (op.is_free) {
      if (is_loss[op.id]) {  // the end of the backward: the main thread frees the loss
        backward = false;
        after_loss = false;
      }
    } else if (op.bytes == kLossBytes) {
      is_loss[op.id] = true;
      after_loss = true;
      found = true;
    } else if (after_loss) {
      backward = true;  // the logits' gradient: the backward begins
      after_loss = false;
    }
    if (backward) thread[i] = 2;
  }
  if (!found) thread.clear();
  return thread;
}

}  // namespace luma::testing
