// HttpServer: HTTP/1.1 (TLS or plain) on libmicrohttpd's event loop, for
// the coordinator's API, /metrics and the dashboard (ADR 0005).
//
// No thread per connection: a small pool of epoll loops serves every
// connection, so hundreds of idle or slow clients cost memory, not service.
// What an attacker with a socket can do is bounded:
//  - a connection that has not sent a whole request head within
//    `header_deadline` is cut (a client that sends one byte at a time,
//    slowloris, included; libmicrohttpd's own timeout only counts silence);
//  - an idle keep-alive connection is closed after `idle_timeout`;
//  - one remote address holds at most `max_per_address` connections, and
//    all together at most `max_connections`;
//  - a request head larger than 32 KiB gets 431, a body larger than
//    `max_body_bytes` gets 413.
//
// Handlers run on the server's threads: they must not block for long. A
// response is a buffer, an open file (sent without copying where TLS
// allows), or an HttpStream that stays open and sends what is pushed to it
// (Server-Sent Events): a stream with nothing to send parks its connection
// (suspended, no thread, no polling), and one whose client stops reading
// is cut once `limit` bytes wait for it, so memory stays bounded.
//
// Thread-safe: Start once, Stop (or the destructor) once.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "common/log.h"
#include "common/mutex.h"
#include "common/status.h"

struct MHD_Daemon;
struct MHD_Connection;

namespace claw {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // without the query string
  std::string body;
  // Header and query values by name (header names as sent; look up with
  // Header(), which ignores case).
  std::function<std::string(const char* name)> header;
  std::function<std::string(const char* name)> query;
  std::string Header(const char* name) const { return header ? header(name) : ""; }
  std::string Query(const char* name) const { return query ? query(name) : ""; }
};

class HttpServer;

// An open response body that others push bytes into, from any thread.
class HttpStream {
 public:
  explicit HttpStream(size_t limit) : limit_(limit) {}
  HttpStream(const HttpStream&) = delete;
  HttpStream& operator=(const HttpStream&) = delete;
  // Queues bytes to send. False once the stream is closed: its client left,
  // it was cut for not reading (more than `limit` bytes waiting), or the
  // server stops.
  bool Push(std::string_view bytes);
  // Ends the response after what is queued.
  void Close();
  bool closed() const;
  bool overflowed() const;  // cut because its client did not read
  size_t buffered() const;

 private:
  friend struct HttpCallbacks;
  const size_t limit_;
  mutable Mutex mu_;
  std::string buf_ CLAW_GUARDED_BY(mu_);
  size_t sent_ CLAW_GUARDED_BY(mu_) = 0;  // of buf_
  bool closed_ CLAW_GUARDED_BY(mu_) = false;
  bool overflowed_ CLAW_GUARDED_BY(mu_) = false;
  bool suspended_ CLAW_GUARDED_BY(mu_) = false;
  MHD_Connection* connection_ CLAW_GUARDED_BY(mu_) = nullptr;  // null: not (or no longer) sending
  int fd_ CLAW_GUARDED_BY(mu_) = -1;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::string body;
  // Instead of `body`: send this open file's first `file_size` bytes (the
  // server closes it).
  int file_fd = -1;
  uint64_t file_size = 0;
  std::map<std::string, std::string> headers;
  // Instead of both: a response that stays open (HttpStream).
  std::shared_ptr<HttpStream> stream;
};

class HttpServer {
 public:
  using Handler = std::function<HttpResponse(const HttpRequest&)>;
  struct Options {
    std::string host = "127.0.0.1";
    int port = 0;                   // 0: any free port
    std::string cert_pem, key_pem;  // both empty: plain HTTP
    unsigned threads = 2;
    unsigned max_connections = 4096;
    unsigned max_per_address = 64;
    std::chrono::seconds header_deadline{10};
    std::chrono::seconds idle_timeout{60};
    size_t max_body_bytes = 1 << 20;
  };

  // Binds (a port in use is FailedPrecondition, naming it) and serves.
  static Result<std::unique_ptr<HttpServer>> Start(const Options& options, Handler handler,
                                                   Logger log);
  ~HttpServer();
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  struct Tracked;
  HttpServer(Options options, Handler handler, Logger log);
  void Watchdog();

  friend struct HttpCallbacks;  // libmicrohttpd's C callbacks (http_server.cc)

  Options options_;
  Handler handler_;
  Logger log_;
  MHD_Daemon* daemon_ = nullptr;
  int port_ = 0;
  std::thread watchdog_;

  Mutex mu_;
  bool stopping_ CLAW_GUARDED_BY(mu_) = false;
  std::condition_variable_any wake_;
  // Open connections: their socket and when their current request began
  // (reset after each response), until the whole head has arrived.
  std::map<MHD_Connection*, std::unique_ptr<Tracked>> open_ CLAW_GUARDED_BY(mu_);
  // Streams being sent: closed (and their connections resumed) before the
  // daemon stops, as libmicrohttpd requires.
  std::vector<std::weak_ptr<HttpStream>> streams_ CLAW_GUARDED_BY(mu_);
};

}  // namespace claw
