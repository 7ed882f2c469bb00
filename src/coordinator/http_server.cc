#include "coordinator/http_server.h"

#include <microhttpd.h>
#include <strings.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cstdarg>
#include <cstring>
#include <cstdio>

#include "common/text.h"
#include "coordinator/tcp_listener.h"

namespace claw {

bool HttpStream::Push(std::string_view bytes) {
  MutexLock lock(mu_);
  if (closed_) return false;
  // Past the limit with bytes still waiting: the client does not keep up.
  // (One state larger than the limit still goes to a client that has read
  // everything before it.)
  const size_t waiting = buf_.size() - sent_;
  if (waiting > 0 && waiting + bytes.size() > limit_) {
    // Its client does not read: cut it rather than hold more for it. The
    // shutdown wakes libmicrohttpd, which closes the connection.
    closed_ = true;
    overflowed_ = true;
    std::string().swap(buf_);
    sent_ = 0;
    if (fd_ >= 0) shutdown(fd_, SHUT_RDWR);
    if (suspended_ && connection_) {
      suspended_ = false;
      MHD_resume_connection(connection_);
    }
    return false;
  }
  buf_.append(bytes);
  if (suspended_ && connection_) {
    suspended_ = false;
    MHD_resume_connection(connection_);
  }
  return true;
}

void HttpStream::Close() {
  MutexLock lock(mu_);
  closed_ = true;
  if (suspended_ && connection_) {
    suspended_ = false;
    MHD_resume_connection(connection_);
  }
}

bool HttpStream::closed() const {
  MutexLock lock(mu_);
  return closed_;
}

bool HttpStream::overflowed() const {
  MutexLock lock(mu_);
  return overflowed_;
}

size_t HttpStream::buffered() const {
  MutexLock lock(mu_);
  return buf_.size() - sent_;
}

struct HttpServer::Tracked {
  int fd = -1;
  std::chrono::steady_clock::time_point began;  // of the current request's head
  bool head_done = false;
  bool cut = false;  // the watchdog shut it down
};

namespace {

// What one request carries between libmicrohttpd's calls.
struct RequestState {
  std::string body;
  bool too_big = false;
  uint64_t dropped = 0;  // bytes of a too-big body read and dropped
};

// A body over the limit is still read (and dropped) up to this many times
// the limit, so that a client still writing it gets the 413 rather than a
// broken pipe; beyond, the connection is closed.
constexpr uint64_t kDrainFactor = 8;

std::string Lookup(MHD_Connection* c, MHD_ValueKind kind, const char* name) {
  const char* v = MHD_lookup_connection_value(c, kind, name);
  return v ? v : "";
}

MHD_Response* StreamResponse(MHD_Connection* c, const std::shared_ptr<HttpStream>& stream);

MHD_Result Send(MHD_Connection* c, HttpResponse r) {
  MHD_Response* response =
      r.stream ? StreamResponse(c, r.stream)
      : r.file_fd >= 0
          ? MHD_create_response_from_fd64(r.file_size, r.file_fd)  // closes the file
          : MHD_create_response_from_buffer(r.body.size(), r.body.data(), MHD_RESPMEM_MUST_COPY);
  if (!response) return MHD_NO;
  MHD_add_response_header(response, MHD_HTTP_HEADER_CONTENT_TYPE, r.content_type.c_str());
  for (const auto& [name, value] : r.headers) {
    MHD_add_response_header(response, name.c_str(), value.c_str());
  }
  MHD_Result ok = MHD_queue_response(c, static_cast<unsigned>(r.status), response);
  MHD_destroy_response(response);
  return ok;
}

HttpResponse TooLarge(size_t limit) {
  return HttpResponse{413, "application/json",
                      R"({"error": {"code": "RESOURCE_EXHAUSTED", "message": "request body larger )"
                      R"(than )" + std::to_string(limit) + R"( bytes"}})" "\n"};
}

}  // namespace

struct HttpCallbacks {
  // libmicrohttpd asks for more of a stream's body when the socket can take
  // it. Nothing queued: the connection is suspended until Push resumes it
  // (returning 0 without suspending would make the event loop spin).
  static ssize_t StreamRead(void* cls, uint64_t, char* buf, size_t max) {
    HttpStream& s = **static_cast<std::shared_ptr<HttpStream>*>(cls);
    MutexLock lock(s.mu_);
    if (s.sent_ < s.buf_.size()) {
      const size_t n = std::min(max, s.buf_.size() - s.sent_);
      std::memcpy(buf, s.buf_.data() + s.sent_, n);
      s.sent_ += n;
      if (s.sent_ == s.buf_.size()) {
        s.buf_.clear();
        s.sent_ = 0;
      } else if (s.sent_ > 64 * 1024 && s.sent_ > s.buf_.size() / 2) {
        s.buf_.erase(0, s.sent_);
        s.sent_ = 0;
      }
      return static_cast<ssize_t>(n);
    }
    if (s.closed_) return MHD_CONTENT_READER_END_OF_STREAM;
    s.suspended_ = true;
    MHD_suspend_connection(s.connection_);
    return 0;
  }

  // The response is done with: its connection closed or the server stopped.
  static void StreamFree(void* cls) {
    auto* holder = static_cast<std::shared_ptr<HttpStream>*>(cls);
    {
      HttpStream& s = **holder;
      MutexLock lock(s.mu_);
      s.closed_ = true;
      s.connection_ = nullptr;
      s.fd_ = -1;
      std::string().swap(s.buf_);
    }
    delete holder;
  }

  static MHD_Response* NewStreamResponse(MHD_Connection* c, const std::shared_ptr<HttpStream>& stream) {
    auto* holder = new std::shared_ptr<HttpStream>(stream);
    MHD_Response* r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16 * 1024, &StreamRead,
                                                        holder, &StreamFree);
    if (!r) {  // out of memory: the stream never starts
      delete holder;
      stream->Close();
      return nullptr;
    }
    const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    MutexLock lock(stream->mu_);
    stream->connection_ = c;
    stream->fd_ = info ? info->connect_fd : -1;
    return r;
  }

  static MHD_Result Request(void* cls, MHD_Connection* c, const char* url, const char* method,
                            const char*, const char* upload, size_t* upload_size, void** state) {
    auto* server = static_cast<HttpServer*>(cls);
    if (*state == nullptr) {  // the head is complete
      {
        MutexLock lock(server->mu_);
        if (auto it = server->open_.find(c); it != server->open_.end()) it->second->head_done = true;
      }
      std::string length = Lookup(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
      if (!length.empty() && std::strtoull(length.c_str(), nullptr, 10) >
                                 kDrainFactor * server->options_.max_body_bytes) {
        return Send(c, TooLarge(server->options_.max_body_bytes));  // the body is not read
      }
      *state = new RequestState();
      return MHD_YES;
    }
    auto* rs = static_cast<RequestState*>(*state);
    if (*upload_size > 0) {  // a piece of the body
      if (!rs->too_big && rs->body.size() + *upload_size > server->options_.max_body_bytes) {
        rs->too_big = true;
        rs->dropped = rs->body.size();
        std::string().swap(rs->body);
      }
      if (rs->too_big) {
        rs->dropped += *upload_size;
        if (rs->dropped > kDrainFactor * server->options_.max_body_bytes) return MHD_NO;
      } else {
        rs->body.append(upload, *upload_size);
      }
      *upload_size = 0;
      return MHD_YES;
    }
    if (rs->too_big) return Send(c, TooLarge(server->options_.max_body_bytes));
    HttpRequest req;
    req.method = method;
    req.path = url;
    req.body = std::move(rs->body);
    req.header = [c](const char* name) { return Lookup(c, MHD_HEADER_KIND, name); };
    req.query = [c](const char* name) { return Lookup(c, MHD_GET_ARGUMENT_KIND, name); };
    HttpResponse response;
    try {
      response = server->handler_(req);
      if (response.stream) {
        MutexLock lock(server->mu_);
        if (server->stopping_) {
          response = HttpResponse{503, "application/json",
                                  R"({"error": {"code": "UNAVAILABLE", "message": "stopping"}})"};
        } else {
          std::erase_if(server->streams_, [](const auto& w) { return w.expired(); });
          server->streams_.push_back(response.stream);
        }
      }
    } catch (const std::exception& e) {
      server->log_->error("http handler failed path={} cause={}", EscapeControl(req.path),
                          EscapeControl(e.what()));
      response = HttpResponse{500, "application/json",
                              R"({"error": {"code": "INTERNAL", "message": "internal error"}})"};
    }
    return Send(c, std::move(response));
  }

  static void Completed(void* cls, MHD_Connection* c, void** state, MHD_RequestTerminationCode) {
    delete static_cast<RequestState*>(*state);
    *state = nullptr;
    auto* server = static_cast<HttpServer*>(cls);
    MutexLock lock(server->mu_);
    if (auto it = server->open_.find(c); it != server->open_.end()) {
      // Kept alive: the next request's head has its own deadline.
      it->second->head_done = false;
      it->second->began = std::chrono::steady_clock::now();
    }
  }

  static void Connection(void* cls, MHD_Connection* c, void**, MHD_ConnectionNotificationCode code) {
    auto* server = static_cast<HttpServer*>(cls);
    MutexLock lock(server->mu_);
    if (code == MHD_CONNECTION_NOTIFY_STARTED) {
      const MHD_ConnectionInfo* info = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
      auto t = std::make_unique<HttpServer::Tracked>();
      t->fd = info ? info->connect_fd : -1;
      t->began = std::chrono::steady_clock::now();
      server->open_[c] = std::move(t);
    } else {
      // Sent before libmicrohttpd closes the socket: the watchdog never
      // touches a descriptor after this.
      server->open_.erase(c);
    }
  }

  static void Log(void* cls, const char* format, va_list args) {
    char text[512];
    std::vsnprintf(text, sizeof text, format, args);
    std::string line(text);
    while (!line.empty() && (line.back() == '\n' || line.back() == '\r')) line.pop_back();
    // Clients that leave mid-handshake or send garbage are routine noise.
    static_cast<HttpServer*>(cls)->log_->debug("http: {}", EscapeControl(line));
  }
};

HttpServer::HttpServer(Options options, Handler handler, Logger log)
    : options_(std::move(options)), handler_(std::move(handler)), log_(std::move(log)) {}

Result<std::unique_ptr<HttpServer>> HttpServer::Start(const Options& options, Handler handler,
                                                      Logger log) {
  auto fd = ListenTcp(options.host, options.port);
  if (!fd.ok()) return fd.status();
  std::unique_ptr<HttpServer> s(new HttpServer(options, std::move(handler), std::move(log)));
  s->port_ = BoundPort(*fd);
  const bool tls = !options.cert_pem.empty();
  unsigned flags = MHD_USE_AUTO_INTERNAL_THREAD | MHD_USE_ERROR_LOG | MHD_ALLOW_SUSPEND_RESUME;
  if (tls) flags |= MHD_USE_TLS;
  const unsigned idle = static_cast<unsigned>(options.idle_timeout.count());
  const size_t memory = 32 * 1024;  // per connection: the request head must fit (431 beyond)
  if (tls) {
    s->daemon_ = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &HttpCallbacks::Request,
        s.get(), MHD_OPTION_EXTERNAL_LOGGER, &HttpCallbacks::Log, s.get(), MHD_OPTION_LISTEN_SOCKET,
        *fd, MHD_OPTION_HTTPS_MEM_CERT, options.cert_pem.c_str(), MHD_OPTION_HTTPS_MEM_KEY,
        options.key_pem.c_str(), MHD_OPTION_THREAD_POOL_SIZE, options.threads,
        MHD_OPTION_CONNECTION_LIMIT, options.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT,
        options.max_per_address, MHD_OPTION_CONNECTION_TIMEOUT, idle,
        MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory, MHD_OPTION_NOTIFY_COMPLETED,
        &HttpCallbacks::Completed, s.get(), MHD_OPTION_NOTIFY_CONNECTION, &HttpCallbacks::Connection,
        s.get(), MHD_OPTION_END);
  } else {
    s->daemon_ = MHD_start_daemon(
        flags, 0, nullptr, nullptr, &HttpCallbacks::Request,
        s.get(), MHD_OPTION_EXTERNAL_LOGGER, &HttpCallbacks::Log, s.get(), MHD_OPTION_LISTEN_SOCKET,
        *fd, MHD_OPTION_THREAD_POOL_SIZE, options.threads, MHD_OPTION_CONNECTION_LIMIT,
        options.max_connections, MHD_OPTION_PER_IP_CONNECTION_LIMIT, options.max_per_address,
        MHD_OPTION_CONNECTION_TIMEOUT, idle, MHD_OPTION_CONNECTION_MEMORY_LIMIT, memory,
        MHD_OPTION_NOTIFY_COMPLETED, &HttpCallbacks::Completed, s.get(),
        MHD_OPTION_NOTIFY_CONNECTION, &HttpCallbacks::Connection, s.get(), MHD_OPTION_END);
  }
  if (!s->daemon_) {
    close(*fd);
    return Unavailable(std::string("cannot start the HTTP server on ") + options.host + ":" +
                       std::to_string(s->port_) +
                       (tls ? " (is the TLS certificate and key valid PEM?)" : ""));
  }
  s->watchdog_ = std::thread([srv = s.get()] { srv->Watchdog(); });
  return s;
}

HttpServer::~HttpServer() { Stop(); }

void HttpServer::Stop() {
  {
    MutexLock lock(mu_);
    if (stopping_) return;
    stopping_ = true;
  }
  // libmicrohttpd must not stop with a connection suspended.
  std::vector<std::weak_ptr<HttpStream>> streams;
  {
    MutexLock lock(mu_);
    streams.swap(streams_);
  }
  for (auto& w : streams) {
    if (auto s = w.lock()) s->Close();
  }
  wake_.notify_all();
  if (watchdog_.joinable()) watchdog_.join();
  if (daemon_) MHD_stop_daemon(daemon_);  // closes the listening socket too
  daemon_ = nullptr;
}

// Cuts connections whose request head is late: libmicrohttpd's timeout
// counts only silence, so one byte every few seconds would keep a
// connection (and a slot of the per-address cap) forever.
void HttpServer::Watchdog() {
  MutexLock lock(mu_);
  while (!stopping_) {
    wake_.wait_for(lock, std::chrono::milliseconds(250));
    auto now = std::chrono::steady_clock::now();
    for (auto& [c, t] : open_) {
      if (!t->head_done && !t->cut && t->fd >= 0 && now - t->began > options_.header_deadline) {
        shutdown(t->fd, SHUT_RDWR);  // libmicrohttpd sees the end and closes it
        t->cut = true;
      }
    }
  }
}

namespace {
MHD_Response* StreamResponse(MHD_Connection* c, const std::shared_ptr<HttpStream>& stream) {
  return HttpCallbacks::NewStreamResponse(c, stream);
}
}  // namespace

}  // namespace claw
