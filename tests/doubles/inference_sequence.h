// inference_sequence.h - synthetic allocation sequences of other shapes than training,
// the way PyTorch with its caching allocator off makes them (every tensor one cudaMalloc
// of its exact size), for the placement checks (docs/placement.md) beside
// training_sequence.h's:
//
// - decoding: a decoder LM serving batches of requests one after another. Each batch has
//   its own batch size, prompt length and output length. Prefill allocates each layer's
//   key and value caches for the prompt; then every decoding step grows them by
//   concatenation (torch.cat: a new tensor one token longer, the old one freed after the
//   copy), as a model without a preallocated cache does, along with the generated ids
//   (cat too) and the step's small activations and logits. A batch's caches go when it
//   ends. So the live bytes creep up a little each step, every size is new, and the
//   freed caches are always a little too small for the next request: the shape that
//   holds free pieces each smaller than the request.
// - moe-routing: a mixture-of-experts layer stack, training, where each step routes its
//   tokens to experts at random: per layer and expert one buffer of the tokens routed
//   there (any count, so any size), its expert's hidden activations and output, then the
//   combined output; the backward frees them in reverse. Many mid-size allocations of
//   unrelated sizes in one step, none repeating across steps.
// Deterministic for a given seed.
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "simulate/sim_sequence.h"

namespace luma::testing {

struct DecodingModel {
  std::string name;
  unsigned layers = 12;
  std::uint64_t d_model = 768;
  std::uint64_t ffn = 3072;
  unsigned heads = 12;
  std::uint64_t vocab = 50257;
  std::vector<std::uint64_t> batches;
  std::vector<std::uint64_t> prompts;
  std::vector<std::uint64_t> outputs;
  unsigned requests = 6;  // batches served, one after another
  std::uint64_t seed = 1;
};

struct MoeModel {
  std::string name;
  unsigned layers = 6;
  std::uint64_t d_model = 512;
  std::uint64_t ffn = 2048;
  unsigned experts = 8;
  std::vector<std::uint64_t> tokens;  // tokens per step, drawn at random
  unsigned steps = 40;
  std::uint64_t seed = 1;
};

// Shared by both generators: ids in allocation order, a clock of 2 us per call.
class SequenceBuilder {
 public:
  using Id = std::uint32_t;
  Id alloc(std::uint64_t bytes) {
    const auto id = static_cast<Id>(next_id_++);
    s_.ops.push_back({t_ += 2000, bytes, id, false});
    return id;
  }
  void free(Id id) { s_.ops.push_back({t_ += 2000, 0, id, true}); }
  core::SimSequence finish() {
    core::finish_sim_sequence(s_);
    return s_;
  }

 private:
  core::SimSequence s_;
  std::uint64_t next_id_ = 0;
  std::uint64_t t_ = 0;
};

inline core::SimSequence make_decoding(const DecodingModel& m) {
  std::mt19937_64 rng(m.seed);
  SequenceBuilder b;
  using Id = SequenceBuilder::Id;
  const std::uint64_t d = m.d_model, half = 2;  // fp16 weights and activations
  std::vector<Id> weights;
  weights.push_back(b.alloc(m.vocab * d * half));  // embedding (tied head)
  for (unsigned l = 0; l < m.layers; ++l) {
    weights.push_back(b.alloc(d * 3 * d * half));
    weights.push_back(b.alloc(d * d * half));
    weights.push_back(b.alloc(d * m.ffn * half));
    weights.push_back(b.alloc(m.ffn * d * half));
    weights.push_back(b.alloc(4 * d * 4));  // layer norms and biases, fp32
  }
  for (unsigned r = 0; r < m.requests; ++r) {
    const std::uint64_t batch = m.batches[rng() % m.batches.size()];
    const std::uint64_t prompt = m.prompts[rng() % m.prompts.size()];
    const std::uint64_t output = m.outputs[rng() % m.outputs.size()];
    // Prefill: the prompt through every layer; its caches stay.
    Id ids = b.alloc(batch * prompt * 8);
    std::vector<Id> k(m.layers), v(m.layers);
    {
      const std::uint64_t t = batch * prompt;
      Id hidden = b.alloc(t * d * half);
      for (unsigned l = 0; l < m.layers; ++l) {
        const Id qkv = b.alloc(t * 3 * d * half);
        k[l] = b.alloc(t * d * half);
        v[l] = b.alloc(t * d * half);
        const Id attn = b.alloc(t * d * half);
        b.free(qkv);
        const Id fc1 = b.alloc(t * m.ffn * half);
        const Id next = b.alloc(t * d * half);
        b.free(fc1);
        b.free(attn);
        b.free(hidden);
        hidden = next;
      }
      const Id logits = b.alloc(batch * m.vocab * 4);  // the last position only
      b.free(hidden);
      b.free(logits);
    }
    // Decoding: one token per step; caches and ids grow by concatenation.
    for (std::uint64_t step = 1; step <= output; ++step) {
      const std::uint64_t len = prompt + step;
      Id hidden = b.alloc(batch * d * half);
      for (unsigned l = 0; l < m.layers; ++l) {
        const Id qkv = b.alloc(batch * 3 * d * half);
        const Id k2 = b.alloc(batch * len * d * half);  // torch.cat((k, k_new))
        b.free(k[l]);
        k[l] = k2;
        const Id v2 = b.alloc(batch * len * d * half);
        b.free(v[l]);
        v[l] = v2;
        const Id scores = b.alloc(batch * m.heads * len * 4);
        const Id attn = b.alloc(batch * d * half);
        b.free(scores);
        b.free(qkv);
        const Id fc1 = b.alloc(batch * m.ffn * half);
        const Id next = b.alloc(batch * d * half);
        b.free(fc1);
        b.free(attn);
        b.free(hidden);
        hidden = next;
      }
      const Id logits = b.alloc(batch * m.vocab * 4);
      const Id token = b.alloc(batch * 8);
      b.free(logits);
      b.free(hidden);
      const Id ids2 = b.alloc(batch * len * 8);  // torch.cat((ids, token))
      b.free(ids);
      b.free(token);
      ids = ids2;
    }
    for (unsigned l = 0; l < m.layers; ++l) b.free(k[l]), b.free(v[l]);
    b.free(ids);
  }
  return b.finish();
}

inline core::SimSequence make_moe(const MoeModel& m) {
  std::mt19937_64 rng(m.seed);
  SequenceBuilder b;
  using Id = SequenceBuilder::Id;
  const std::uint64_t d = m.d_model;
  std::vector<Id> params;
  for (unsigned l = 0; l < m.layers; ++l) {
    params.push_back(b.alloc(d * m.experts * 4));  // router
    for (unsigned e = 0; e < m.experts; ++e) {
      params.push_back(b.alloc(d * m.ffn * 4));
      params.push_back(b.alloc(m.ffn * d * 4));
    }
  }
  for (unsigned step = 0; step < m.steps; ++step) {
    const std::uint64_t tokens = m.tokens[rng() % m.tokens.size()];
    std::vector<Id> saved;
    Id x = b.alloc(tokens * d * 4);
    saved.push_back(x);
    for (unsigned l = 0; l < m.layers; ++l) {
      saved.push_back(b.alloc(tokens * m.experts * 4));  // router probabilities
      // Top-1 routing at random: how many tokens each expert gets.
      std::vector<std::uint64_t> count(m.experts, 0);
      for (std::uint64_t t = 0; t < tokens; t += 16) ++count[rng() % m.experts];  // 16 tokens at a time
      for (unsigned e = 0; e < m.experts; ++e) {
        if (count[e] == 0) continue;
        const std::uint64_t n = count[e] * 16;
        saved.push_back(b.alloc(n * d * 4));      // gathered input
        saved.push_back(b.alloc(n * m.ffn * 4));  // hidden (saved for backward)
        saved.push_back(b.alloc(n * d * 4));      // expert output
      }
      saved.push_back(b.alloc(tokens * d * 4));  // combined output
    }
    const Id loss = b.alloc(4);
    Id grad = b.alloc(tokens * d * 4);
    for (auto it = saved.rbegin(); it != saved.rend(); ++it) {
      b.free(*it);
      const Id g = b.alloc(tokens * d * 4 / 2 + (*it % 7) * 4096);  // input gradients of other sizes
      b.free(grad);
      grad = g;
    }
    std::vector<Id> grads;
    for (std::size_t p = 0; p < params.size(); ++p) grads.push_back(b.alloc(p % 2 == 0 ? d * m.ffn * 4 : m.ffn * d * 4));
    b.free(grad);
    b.free(loss);
    for (Id g : grads) b.free(g);
  }
  return b.finish();
}

// The runs of the placement checks beside training_models(): decoding with growing caches
// (GPT-2 small serving batches of 1-16 requests, prompts of 32-512 tokens, 16-192 new
// tokens), and mixture-of-experts routing.
inline std::vector<DecodingModel> decoding_models() {
  DecodingModel dec;
  dec.name = "decoding";
  dec.batches = {1, 4, 8, 16};
  dec.prompts = {32, 96, 200, 512};
  dec.outputs = {16, 64, 128, 192};
  dec.requests = 6;
  dec.seed = 31;
  return {dec};
}

inline std::vector<MoeModel> moe_models() {
  MoeModel moe;
  moe.name = "moe-routing";
  moe.tokens = {2048, 4096, 6144, 8192};
  moe.steps = 30;
  moe.seed = 41;
  return {moe};
}

}  // namespace luma::testing
