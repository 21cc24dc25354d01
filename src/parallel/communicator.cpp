#include "parallel/communicator.h"

#include <cstdint>
#include <cstring>

namespace kimi {

void Communicator::broadcast_bytes(std::vector<std::byte>& data, int root) {
  uint64_t n = data.size();
  broadcast(std::as_writable_bytes(std::span(&n, 1)), root);
  data.resize(size_t(n));
  if (n > 0) broadcast(data, root);
}

}  // namespace kimi
