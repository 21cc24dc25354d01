#include "engine/sampler.h"

#include <algorithm>
#include <bit>
#include <cmath>
#include <limits>
#include <utility>

namespace kimi {

namespace {

constexpr float kNegInf = -std::numeric_limits<float>::infinity();
constexpr float kGreedyBelow = 1e-5f;  // vLLM's _SAMPLING_EPS: lower temperatures are greedy
constexpr size_t kBlock = 256;         // the draw skips whole blocks by their sums
constexpr uint32_t kBinShift = 20;     // histogram bins: exponent + 3 mantissa bits of a weight
constexpr size_t kBins = (0x3F800000u >> kBinShift) + 1;  // weights are in [0, 1]

bool in_vocab(int32_t id, size_t vocab) { return id >= 0 && size_t(id) < vocab; }

// Largest value, NaN ignored (a NaN logit must not poison the row). Eight running maxima so
// that the compiler vectorises the loop.
float row_max(std::span<const float> x) {
  float m[8];
  std::fill(m, m + 8, kNegInf);
  size_t i = 0;
  for (; i + 8 <= x.size(); i += 8)
    for (size_t j = 0; j < 8; ++j) m[j] = x[i + j] > m[j] ? x[i + j] : m[j];
  for (; i < x.size(); ++i) m[0] = x[i] > m[0] ? x[i] : m[0];
  return *std::max_element(m, m + 8);
}

// Picks a (mask all ones) or b (mask zero) by bits. Branch-free selects on integer masks let
// GCC vectorise the weight loop, which it will not do around float comparisons and selects
// (they may trap on NaN).
inline float select_bits(uint32_t mask, float a, float b) {
  return std::bit_cast<float>((std::bit_cast<uint32_t>(a) & mask) | (std::bit_cast<uint32_t>(b) & ~mask));
}

// e^x for x <= 0 (logits minus their max), 0 for -inf and NaN; std::exp would cost most of a
// sampling step at a 163840-token vocabulary. x = n ln2 + r with |r| <= ln2/2; e^r by its
// Taylor series to r^7 (truncation < 1e-8 relative, below float rounding); 2^n built in the
// exponent bits.
inline float exp_nonpos(float x) {
  const uint32_t in_range = -uint32_t((std::bit_cast<uint32_t>(x) & 0x7FFFFFFFu) <= 0x42AE0000u);  // |x| <= 87
  const float xc = select_bits(in_range, x, -87.0f);  // keeps 2^n a normal float
  constexpr float kRound = 12582912.0f;               // 1.5 x 2^23: adding it rounds to an integer
  const float n = (xc * 1.44269504f + kRound) - kRound;
  const float r = (xc - n * 0.693359375f) + n * 2.12194440e-4f;  // ln2 split in two for accuracy
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  const float scale = std::bit_cast<float>(uint32_t(int32_t(n) + 127) << 23);
  return select_bits(in_range, p * scale, 0.0f);
}

// Sum of a block of floats in double, four running sums for speed.
double block_sum(const float* w, size_t n) {
  double s[4] = {0, 0, 0, 0};
  size_t i = 0;
  for (; i + 4 <= n; i += 4)
    for (size_t j = 0; j < 4; ++j) s[j] += double(w[i + j]);
  for (; i < n; ++i) s[0] += double(w[i]);
  return (s[0] + s[1]) + (s[2] + s[3]);
}

// A candidate token. Ranked by weight, ties to the lower id, so that every cut is exact and
// the same on every platform.
using Cand = sampler_detail::Candidate;
bool better(const Cand& a, const Cand& b) { return a.w > b.w || (a.w == b.w && a.id < b.id); }

uint32_t bin_of(float w) { return std::bit_cast<uint32_t>(w) >> kBinShift; }  // monotonic for w >= 0

void collect_bin(std::span<const float> w, uint32_t bin, std::vector<Cand>& out) {
  out.clear();
  for (size_t i = 0; i < w.size(); ++i)
    if (w[i] > 0.0f && bin_of(w[i]) == bin) out.push_back({w[i], int32_t(i)});
}

// The worst-ranked candidate of the best-ranked prefix of v whose weight reaches need
// (quickselect by mass: expected linear, no full sort). v is reordered.
Cand mass_boundary(std::vector<Cand>& v, double need) {
  size_t lo = 0, hi = v.size();
  for (;;) {
    if (hi - lo <= 16) {
      std::sort(v.begin() + ptrdiff_t(lo), v.begin() + ptrdiff_t(hi), better);
      double cum = 0;
      for (size_t i = lo; i < hi; ++i)
        if ((cum += v[i].w) >= need) return v[i];
      return v[hi - 1];  // only by rounding
    }
    Cand a = v[lo], b = v[lo + (hi - lo) / 2], c = v[hi - 1];  // median of three
    if (better(b, a)) std::swap(a, b);
    if (better(c, b)) std::swap(b, c);
    if (better(b, a)) std::swap(a, b);
    const Cand pivot = b;
    const auto first = v.begin() + ptrdiff_t(lo), last = v.begin() + ptrdiff_t(hi);
    const auto mid = std::partition(first, last, [&](const Cand& x) { return better(x, pivot); });
    double upper = 0;
    for (auto it = first; it != mid; ++it) upper += it->w;
    if (upper >= need) {  // the boundary is above the pivot (and the upper part is not empty)
      hi = size_t(mid - v.begin());
      continue;
    }
    need -= upper;
    if (double(pivot.w) >= need) return pivot;
    need -= pivot.w;
    std::iter_swap(mid, std::find_if(mid, last, [&](const Cand& x) { return x.id == pivot.id; }));
    lo = size_t(mid - v.begin()) + 1;
    if (lo == hi) return pivot;  // only by rounding
  }
}

}  // namespace

Sampler::Sampler(const SamplingParams& p, uint64_t seed, int32_t eos_token_id)
    : Sampler(p, seed, eos_token_id >= 0 ? std::vector<int32_t>{eos_token_id} : std::vector<int32_t>{}) {}

Sampler::Sampler(const SamplingParams& p, uint64_t seed, std::vector<int32_t> eos_token_ids) : params_(p), rng_(seed) {
  if (params_.min_tokens > 0) {
    // vLLM suppresses every token that would end the sequence: stop_token_ids and, unless
    // ignored, eos.
    min_tokens_masked_ = params_.stop_token_ids;
    if (!params_.ignore_eos)
      min_tokens_masked_.insert(min_tokens_masked_.end(), eos_token_ids.begin(), eos_token_ids.end());
  }
}

void Sampler::process(std::span<float> logits, std::span<const int32_t> prompt, std::span<const int32_t> output,
                      std::span<const uint64_t> allowed) {
  const size_t vocab = logits.size();
  if (params_.logprobs) raw_.assign(logits.begin(), logits.end());

  for (const auto& [id, bias] : params_.logit_bias)
    if (in_vocab(id, vocab)) logits[size_t(id)] += bias;
  if (int64_t(output.size()) < params_.min_tokens)
    for (int32_t id : min_tokens_masked_)
      if (in_vocab(id, vocab)) logits[size_t(id)] = kNegInf;
  apply_penalties(logits, prompt, output);
  if (!allowed.empty())
    for (size_t w = 0; w * 64 < vocab; ++w) {
      const uint64_t bits = w < allowed.size() ? allowed[w] : 0;
      if (bits == ~uint64_t(0)) continue;
      for (size_t j = 0; j < 64 && w * 64 + j < vocab; ++j)
        if (!((bits >> j) & 1)) logits[w * 64 + j] = kNegInf;
    }
}

SampleResult Sampler::result(int32_t token) {
  SampleResult res{};
  res.token = token;
  if (params_.logprobs)
    res.top = top_logprobs(raw_, *params_.logprobs, &res.logprob, res.token);
  else
    res.logprob = std::numeric_limits<float>::quiet_NaN();
  return res;
}

SampleResult Sampler::sample(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, std::span<const uint64_t> allowed) {
  process(logits, prompt, output, allowed);
  return result(params_.temperature < kGreedyBelow ? argmax(logits) : draw(logits));
}

SampleResult Sampler::verify(std::span<float> logits, std::span<const int32_t> prompt,
                             std::span<const int32_t> output, std::span<const uint64_t> allowed, int32_t draft,
                             bool& accepted) {
  process(logits, prompt, output, allowed);
  if (params_.temperature < kGreedyBelow) {
    const int32_t token = argmax(logits);
    accepted = token == draft;
    return result(token);
  }
  // The draft was chosen greedily (q is one-hot on it): accept it with probability p(draft),
  // else draw from p with the draft removed, renormalised (max(0, p - q) normalised). The
  // accepted-or-redrawn token is then distributed exactly as p.
  accepted = false;
  if (!weigh(logits)) return result(argmax(logits));
  const size_t vocab = logits.size();
  // One pass of block sums serves both the acceptance test and, after a rejection, the redraw:
  // removing the draft only takes its weight out of its block's sum.
  double total = sum_blocks(logits);
  const double u = rng_.uniform();
  if (in_vocab(draft, vocab) && u * total < double(logits[size_t(draft)])) {
    accepted = true;
    return result(draft);
  }
  if (in_vocab(draft, vocab)) {
    const double w = double(logits[size_t(draft)]);
    block_sums_[size_t(draft) / kBlock] -= w;
    total -= w;
    logits[size_t(draft)] = 0.0f;
  }
  return result(pick_summed(logits, total, rng_.uniform()));
}

void Sampler::apply_penalties(std::span<float> logits, std::span<const int32_t> prompt,
                              std::span<const int32_t> output) {
  const size_t vocab = logits.size();
  const float rep = params_.repetition_penalty;
  if (rep != 1.0f) {
    // Each distinct token of prompt + output once: mark, then apply and unmark in one pass,
    // which leaves seen_ all zero for the next call.
    seen_.resize(vocab);
    for (auto toks : {prompt, output})
      for (int32_t t : toks)
        if (in_vocab(t, vocab)) seen_[size_t(t)] = 1;
    for (auto toks : {prompt, output})
      for (int32_t t : toks) {
        if (!in_vocab(t, vocab) || !seen_[size_t(t)]) continue;
        seen_[size_t(t)] = 0;
        float& l = logits[size_t(t)];
        l = l > 0 ? l / rep : l * rep;
      }
  }
  const float freq = params_.frequency_penalty, pres = params_.presence_penalty;
  if (freq != 0.0f || pres != 0.0f) {
    counts_.resize(vocab);
    for (int32_t t : output)
      if (in_vocab(t, vocab)) ++counts_[size_t(t)];
    for (int32_t t : output) {
      if (!in_vocab(t, vocab) || counts_[size_t(t)] == 0) continue;
      logits[size_t(t)] -= freq * float(counts_[size_t(t)]) + pres;
      counts_[size_t(t)] = 0;
    }
  }
}

bool Sampler::weigh(std::span<float> w) {
  const float mx = row_max(w);
  if (mx == kNegInf) return false;
  // The row becomes unnormalised probabilities exp((l - max) / T). The max has weight 1, so
  // min_p (relative to the top probability) is a plain threshold on the weight.
  const float inv_t = 1.0f / params_.temperature, min_p = params_.min_p;
  for (float& x : w) {
    const float e = exp_nonpos((x - mx) * inv_t);
    // Non-negative floats order as their bits: w >= min_p without a float comparison.
    x = select_bits(-uint32_t(std::bit_cast<int32_t>(e) >= std::bit_cast<int32_t>(min_p)), e, 0.0f);
  }
  if ((params_.top_k > 0 && size_t(params_.top_k) < w.size()) || params_.top_p < 1.0f) truncate(w);
  return true;
}

int32_t Sampler::draw(std::span<float> w) {
  if (!weigh(w)) return argmax(w);  // everything masked: nothing better to do
  return pick(w, rng_.uniform());   // one draw per token, whatever the settings: streams stay aligned
}

double Sampler::sum_blocks(std::span<const float> w) {
  const size_t vocab = w.size();
  block_sums_.resize((vocab + kBlock - 1) / kBlock);
  double total = 0;
  for (size_t b = 0; b < block_sums_.size(); ++b)
    total += block_sums_[b] = block_sum(w.data() + b * kBlock, std::min(kBlock, vocab - b * kBlock));
  return total;
}

int32_t Sampler::pick(std::span<const float> w, double u) { return pick_summed(w, sum_blocks(w), u); }

int32_t Sampler::pick_summed(std::span<const float> w, double total, double u) {
  const size_t vocab = w.size();
  // The first token whose running mass exceeds u x total, skipping whole blocks by their sums.
  const double r = u * total;
  double cum = 0;
  for (size_t b = 0; b < block_sums_.size(); ++b) {
    if (cum + block_sums_[b] > r) {
      double c = cum;
      for (size_t i = b * kBlock, end = std::min(vocab, i + kBlock); i < end; ++i)
        if ((c += w[i]) > r) return int32_t(i);
    }  // (a block summed in another order can fall just short: then the scan goes on)
    cum += block_sums_[b];
  }
  for (size_t i = vocab; i-- > 0;)  // only by rounding: the last token that can be drawn
    if (w[i] > 0.0f) return int32_t(i);
  return argmax(w);
}

void Sampler::truncate(std::span<float> w) {
  // A histogram of weight by its top bits (monotonic in the weight) finds the bins where the
  // top-k count and the top-p mass are crossed; only those bins' tokens are ranked one by one.
  bin_count_.assign(kBins, 0);
  bin_mass_.assign(kBins, 0.0);
  uint32_t* count = bin_count_.data();  // (locals: stores through the vectors would force reloads)
  double* mass = bin_mass_.data();
  for (float x : w)
    if (x > 0.0f) {
      const uint32_t b = bin_of(x);
      ++count[b];
      mass[b] += double(x);
    }
  double total = 0;
  for (double m : bin_mass_) total += m;

  std::optional<Cand> limit;  // the worst-ranked token kept; none: all are kept
  double set_mass = total;
  size_t k_bin = kBins;  // the bin where top-k cuts, if it does
  if (params_.top_k > 0) {
    const size_t k = size_t(params_.top_k);
    size_t above = 0;
    double above_mass = 0;
    for (size_t b = kBins; b-- > 0;) {
      if (above + bin_count_[b] >= k) {
        k_bin = b;
        break;
      }
      above += bin_count_[b];
      above_mass += bin_mass_[b];
    }
    if (k_bin < kBins) {  // else fewer than k tokens can be drawn at all
      collect_bin(w, uint32_t(k_bin), cands_);
      const size_t need = k - above;
      std::nth_element(cands_.begin(), cands_.begin() + ptrdiff_t(need - 1), cands_.end(), better);
      cands_.resize(need);
      limit = cands_.back();
      set_mass = above_mass;
      for (const Cand& c : cands_) set_mass += c.w;
    }
  }
  if (params_.top_p < 1.0f) {
    // The smallest best-ranked set whose mass reaches top_p of the (top-k) set's.
    const double target = double(params_.top_p) * set_mass;
    double cum = 0;
    const size_t lowest = k_bin < kBins ? k_bin : 0;  // bins below the top-k cut are gone
    for (size_t b = kBins; b-- > lowest;) {
      double m = bin_mass_[b];
      if (b == k_bin) {
        m = 0;
        for (const Cand& c : cands_) m += c.w;  // the part of the bin top-k kept
      }
      if (cum + m >= target) {
        if (b != k_bin) collect_bin(w, uint32_t(b), cands_);
        limit = mass_boundary(cands_, target - cum);
        break;
      }
      cum += m;
    }
  }
  if (!limit) return;
  // Zero every token ranked below the limit; integer compares (weights are non-negative, so
  // they order as their bits) keep the loop vectorised.
  const int32_t limit_bits = std::bit_cast<int32_t>(limit->w), limit_id = limit->id;
  for (size_t i = 0; i < w.size(); ++i) {
    const int32_t bits = std::bit_cast<int32_t>(w[i]);
    const bool keep = bits > limit_bits || (bits == limit_bits && int32_t(i) <= limit_id);
    w[i] = select_bits(-uint32_t(keep), w[i], 0.0f);
  }
}

std::vector<TokenLogprob> top_logprobs(std::span<const float> logits, int k, float* logprob_of, int32_t token_of) {
  const float mx = row_max(logits);
  double sum = 0;
  float e[kBlock];  // a block at a time, so that the exp loop vectorises
  for (size_t b = 0; b < logits.size(); b += kBlock) {
    const size_t n = std::min(kBlock, logits.size() - b);
    for (size_t i = 0; i < n; ++i) e[i] = exp_nonpos(logits[b + i] - mx);
    sum += block_sum(e, n);
  }
  const double lse = double(mx) + std::log(sum);
  const auto lp = [&](size_t id) { return float(double(logits[id]) - lse); };
  if (logprob_of) *logprob_of = in_vocab(token_of, logits.size()) ? lp(size_t(token_of)) : kNegInf;

  // The k best by a bounded insertion: most entries fail the first comparison with the
  // current k-th, so this is one cheap pass for the small k that logprobs allow (<= 20).
  const size_t want = std::min(size_t(std::max(k, 0)), logits.size());
  std::vector<Cand> best;
  best.reserve(want + 1);
  for (size_t t = 0; t < logits.size() && want > 0; ++t) {
    const Cand c{logits[t], int32_t(t)};
    if (best.size() == want && !better(c, best.back())) continue;
    best.insert(std::upper_bound(best.begin(), best.end(), c, better), c);
    if (best.size() > want) best.pop_back();
  }
  std::vector<TokenLogprob> out;
  out.reserve(best.size());
  for (const Cand& c : best) out.push_back({c.id, lp(size_t(c.id))});
  return out;
}

int32_t argmax(std::span<const float> logits) {
  return int32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

}  // namespace kimi
