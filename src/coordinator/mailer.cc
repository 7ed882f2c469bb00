#include "coordinator/mailer.h"

#include <curl/curl.h>

#include <cstdint>
#include <cstring>
#include <ctime>
#include <mutex>

namespace claw {
namespace {

void InitCurl() {
  static std::once_flag once;
  std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

// RFC 5322 date: "Wed, 25 Nov 2026 16:20:00 +0000".
std::string MailDate(Time t) {
  const time_t s = static_cast<time_t>(t.unix_ms() / 1000);
  std::tm tm{};
  gmtime_r(&s, &tm);
  static const char* kDays[] = {"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"};
  static const char* kMonths[] = {"Jan", "Feb", "Mar", "Apr", "May", "Jun",
                                  "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s, %02d %s %04d %02d:%02d:%02d +0000", kDays[tm.tm_wday], tm.tm_mday,
                kMonths[tm.tm_mon], tm.tm_year + 1900, tm.tm_hour, tm.tm_min, tm.tm_sec);
  return buf;
}

// A header's value on one line: control characters (line breaks among
// them: nothing can end the header or start another) become spaces; text
// that is not ASCII is sent as an RFC 2047 encoded word (UTF-8, base64).
std::string HeaderText(std::string_view v) {
  std::string out;
  bool ascii = true;
  for (unsigned char c : v.substr(0, 200)) {
    if (c < 0x20 || c == 0x7f) c = ' ';
    ascii = ascii && c < 0x80;
    out += static_cast<char>(c);
  }
  if (ascii) return out;
  static const char* kB64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  std::string b64;
  for (size_t i = 0; i < out.size(); i += 3) {
    uint32_t n = static_cast<unsigned char>(out[i]) << 16;
    if (i + 1 < out.size()) n |= static_cast<unsigned char>(out[i + 1]) << 8;
    if (i + 2 < out.size()) n |= static_cast<unsigned char>(out[i + 2]);
    b64 += kB64[(n >> 18) & 63];
    b64 += kB64[(n >> 12) & 63];
    b64 += i + 1 < out.size() ? kB64[(n >> 6) & 63] : '=';
    b64 += i + 2 < out.size() ? kB64[n & 63] : '=';
  }
  return "=?UTF-8?B?" + b64 + "?=";
}

struct Body {
  std::string data;
  size_t at = 0;
};

size_t ReadBody(char* buf, size_t size, size_t n, void* p) {
  auto* b = static_cast<Body*>(p);
  const size_t len = std::min(size * n, b->data.size() - b->at);
  std::memcpy(buf, b->data.data() + b->at, len);
  b->at += len;
  return len;
}

}  // namespace

Status CheckMailAddress(const std::string& a) {
  if (a.empty() || a.size() > 254) return InvalidArgument("email address: empty or longer than 254 characters");
  const size_t at = a.find('@');
  if (at == std::string::npos || at == 0 || at + 1 == a.size() || a.find('@', at + 1) != std::string::npos) {
    return InvalidArgument("email address: one local part, '@', one domain (got '" + a.substr(0, 64) + "')");
  }
  for (unsigned char c : a) {
    if (c <= 0x20 || c >= 0x7f || std::strchr("<>(),;:\"[]\\", c)) {
      return InvalidArgument("email address: only printable ASCII without spaces, brackets, commas or quotes");
    }
  }
  if (a.find('.', at) == std::string::npos) return InvalidArgument("email address: the domain has no dot");
  return Status::Ok();
}

Status SendMail(const SmtpOptions& smtp, const std::string& to, const std::string& subject,
                const std::string& text, const std::string& message_id, Time date) {
  if (smtp.url.empty()) return FailedPrecondition("no SMTP server configured (claw coordinator --smtp)");
  CLAW_RETURN_IF_ERROR(CheckMailAddress(to));
  InitCurl();
  Body body;
  body.data = "Date: " + MailDate(date) + "\r\nFrom: " + HeaderText(smtp.from) + "\r\nTo: " + HeaderText(to) +
              "\r\nMessage-ID: <" + HeaderText(message_id) + ">\r\nSubject: " + HeaderText(subject) +
              "\r\nMIME-Version: 1.0\r\nContent-Type: text/plain; charset=utf-8\r\n"
              "Content-Transfer-Encoding: 8bit\r\nAuto-Submitted: auto-generated\r\n\r\n";
  // Lines end in CRLF and stay under SMTP's 998 octets (longer ones are
  // broken); curl dot-stuffs lines that start with a dot.
  size_t line = 0;
  for (char c : text) {
    if (c == '\n' || line >= 900) {
      body.data += "\r\n";
      line = 0;
      if (c == '\n') continue;
    }
    if (c == '\r') continue;
    body.data += c;
    ++line;
  }
  body.data += "\r\n";
  CURL* curl = curl_easy_init();
  if (!curl) return Internal("curl_easy_init failed");
  curl_slist* rcpt = curl_slist_append(nullptr, ("<" + to + ">").c_str());
  const std::string from = "<" + smtp.from + ">";
  const long timeout = static_cast<long>(std::chrono::duration_cast<std::chrono::seconds>(smtp.timeout).count());
  char error[CURL_ERROR_SIZE] = "";
  curl_easy_setopt(curl, CURLOPT_URL, smtp.url.c_str());
  curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "smtp,smtps");
  curl_easy_setopt(curl, CURLOPT_USE_SSL, static_cast<long>(CURLUSESSL_ALL));  // STARTTLS or fail
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYPEER, 1L);
  curl_easy_setopt(curl, CURLOPT_SSL_VERIFYHOST, 2L);
  if (!smtp.ca_file.empty()) curl_easy_setopt(curl, CURLOPT_CAINFO, smtp.ca_file.c_str());
  if (!smtp.user.empty()) {
    curl_easy_setopt(curl, CURLOPT_USERNAME, smtp.user.c_str());
    curl_easy_setopt(curl, CURLOPT_PASSWORD, smtp.password.c_str());
  }
  curl_easy_setopt(curl, CURLOPT_MAIL_FROM, from.c_str());
  curl_easy_setopt(curl, CURLOPT_MAIL_RCPT, rcpt);
  curl_easy_setopt(curl, CURLOPT_READFUNCTION, &ReadBody);
  curl_easy_setopt(curl, CURLOPT_READDATA, &body);
  curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
  curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, timeout);
  curl_easy_setopt(curl, CURLOPT_TIMEOUT, timeout);
  curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
  curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, error);
  const CURLcode rc = curl_easy_perform(curl);
  long reply = 0;
  curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &reply);
  curl_slist_free_all(rcpt);
  curl_easy_cleanup(curl);
  if (rc == CURLE_OK) return Status::Ok();
  const std::string why = std::string(curl_easy_strerror(rc)) + (error[0] ? std::string(": ") + error : "") +
                          (reply ? " (SMTP " + std::to_string(reply) + ")" : "");
  if (reply >= 500 && reply < 600) return InvalidArgument("mail refused: " + why);
  return Unavailable("mail not sent: " + why);
}

}  // namespace claw
