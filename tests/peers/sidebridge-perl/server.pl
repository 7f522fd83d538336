#!/usr/bin/perl
# An independent Side Bridge v1.0 server in Perl (core modules only: IO::Socket::INET, IO::Select,
# JSON::PP), written from the protocol text on a raw socket, with its own HTTP/1.1 framing: where
# Python's and Node's HTTP stacks all frame a reply the same polite way, its switches frame it in
# ways that are legal but unusual (RFC 9112 / RFC 9110), or flawed. Correct by default.
# tests/sidebridge_perl_peer.rs runs check, replay and parity against it.
#
# Phrases (those of tests/peers/sidebridge-audit/server.py, so its recorded cells replay here):
# "remember <word>" keeps a word per chat, "what word" recalls it, "go private" / "go public"
# set disableSendHistory, "bye" ends the session; anything else is echoed ("You said: ...").
#
# Usage: server.pl [--key KEY] [--v a,b,c]   (or env SB_V); prints its URL on stdout.
# Legal framing switches:
#   trickle        every reply written one byte at a time, a 1 ms pause every 16 bytes
#   split          header section and body in two writes, 30 ms apart
#   chunked-ext    Transfer-Encoding: chunked, 5-byte chunks with extensions (;ext=1;q="a b"),
#                  trailer fields after the last chunk (announced in Trailer)
#   continue       an interim `HTTP/1.1 100 Continue` before every final reply
#   early-hints    an interim `103 Early Hints` (with Link fields) before every final reply
#   close-delimited no Content-Length: `Connection: close`, the body ends when the connection does
#   odd-headers    field names in odd case, spaces and tabs around values (OWS)
#   http10-keepalive  `HTTP/1.0 200 OK` with `Connection: keep-alive` and a Content-Length
#   ka-timeout     `Keep-Alive: timeout=1`: a request read on a connection idle for 1 s or more
#                  is dropped unanswered with the connection, and an idle one is closed at 1.3 s
#                  (the server's close and a late request crossing on the wire, made certain:
#                  Node's keepAliveTimeout does this, by chance, at 5 s)
#   idle-408       an unsolicited `408 Request Timeout` (Connection: close) sent on a connection
#                  idle for 300 ms, then the close (as Node does on its idle connections)
# Flawed framing switches:
#   cl-long        Content-Length 10 over the body, then the connection stalls
#   chunk-stall    Transfer-Encoding: chunked, the body's chunks but never the last chunk (0),
#                  then the connection stalls (a stream that stopped before its end)
#   chunk-no-crlf  Transfer-Encoding: chunked, each chunk's data followed by "XY", not CRLF
#   chunk-size-off Transfer-Encoding: chunked, each chunk size 2 more than its data
#   cl-short       Content-Length of the JSON, then 9 more bytes the length does not count
#   bare-lf        the header section's lines end in a bare LF
#   dup-cl         two Content-Length fields with different values
# Flaws of answering (the framing polite):
#   deaf-after-N   after N requests (any method), every request is read and never answered:
#                  the server stops answering midway (a deadlock, a dead worker)
#   hang-malformed a POST whose body is not JSON is never answered (the connection held open);
#                  every other request is
#   exit-after-N   after N requests (any method), the server exits (status 3) on the next one
#                  before answering it: a crash midway
#   slow-first     the first POST is answered after 3 s (over a 2 s --timeout), the rest at once
use strict;
use warnings;
use IO::Socket::INET;
use IO::Select;
use JSON::PP;
use Time::HiRes qw(sleep time);

my %V = map { $_ => 1 } grep { length } split /,/, ($ENV{SB_V} // '');
my $KEY = $ENV{SB_KEY} // '';
while (@ARGV) {
    my $a = shift @ARGV;
    if ($a eq '--v') { $V{$_} = 1 for grep { length } split /,/, (shift @ARGV // '') }
    elsif ($a eq '--key') { $KEY = shift @ARGV // '' }
    else { die "unknown argument $a\n" }
}
$SIG{PIPE} = 'IGNORE';
my $JSON = JSON::PP->new->canonical(0);
my %MEM;    # upper-case chatId -> word
my $SEQ = 0;
my $SERVED = 0;     # requests read, for deaf-after-N
my $SLOWED = 0;     # for slow-first
my ($DEAF) = map { /^deaf-after-(\d+)$/ ? $1 : () } keys %V;
my ($EXIT) = map { /^exit-after-(\d+)$/ ? $1 : () } keys %V;

sub new_id {
    my @h = map { sprintf '%04x', int rand 65536 } 1 .. 8;
    $SEQ++;
    return sprintf '%s%s-%s-4%s-a%s-%s%s%s', $h[0], $h[1], $h[2], substr($h[3], 1),
      substr($h[4], 1), $h[5], $h[6], $h[7];
}

sub msg {
    my ($content, $from) = @_;
    return { id => new_id(), from => $from // 'assistant', content => $content, sources => [] };
}

sub answer {
    my ($chat, $req) = @_;
    my $msgs = $req->{messages};
    return {} unless defined $msgs;
    my (@out, %opts);
    for my $m (ref $msgs eq 'ARRAY' ? @$msgs : ()) {
        next unless ref $m eq 'HASH';
        my $text = $m->{content};
        next unless defined $text && !ref $text && length $text;
        my $low = lc $text;
        if ($low =~ /^remember\s+(.+)$/) {
            my $w = (split ' ', $text, 2)[1];
            $MEM{$chat} = $w;
            push @out, msg("OK, I will keep $w.");
        } elsif (index($low, 'what word') >= 0) {
            my $w = $MEM{$chat};
            push @out, msg(defined $w ? "The word was $w." : 'You gave me no word.');
        } elsif ($low eq 'go private') {
            push @out, msg('History off.');
            $opts{disableSendHistory} = JSON::PP::true;
        } elsif ($low eq 'go public') {
            push @out, msg('History on.');
            $opts{disableSendHistory} = JSON::PP::false;
        } elsif ($low eq 'bye') {
            push @out, msg('Goodbye!');
            $opts{endSession} = JSON::PP::true;
        } else {
            push @out, msg("You said: $text");
        }
    }
    my $resp = { messages => \@out };
    $resp->{options} = \%opts if %opts;
    return $resp;
}

# One connection's state: its read buffer, when its last reply ended, whether it is stalled.
my %CONN;

sub put {
    my ($c, $bytes) = @_;
    my $s = $c->{sock};
    if ($V{trickle}) {
        my $i = 0;
        for my $b (split //, $bytes) {
            defined syswrite($s, $b) or return 0;
            sleep 0.001 if ++$i % 16 == 0;
        }
        return 1;
    }
    my $off = 0;
    while ($off < length $bytes) {
        my $n = syswrite($s, $bytes, length($bytes) - $off, $off);
        return 0 unless defined $n;
        $off += $n;
    }
    return 1;
}

sub reply {
    my ($c, $status, $obj, $keep) = @_;
    my $body = ref $obj ? $JSON->encode($obj) : $obj;
    utf8::encode($body) if utf8::is_utf8($body);
    my %reason = (200 => 'OK', 400 => 'Bad Request', 401 => 'Unauthorized',
        405 => 'Method Not Allowed');
    my $eol = $V{'bare-lf'} ? "\n" : "\r\n";
    my $version = $V{'http10-keepalive'} ? 'HTTP/1.0' : 'HTTP/1.1';
    my @h = ("$version $status $reason{$status}");
    my $ct = 'application/json';
    push @h, $V{'odd-headers'} ? "cOnTeNt-TyPe:  \t$ct \t" : "Content-Type: $ct";
    my $tail = '';
    my $close = !$keep;
    if ($V{'chunk-stall'}) {
        push @h, 'Transfer-Encoding: chunked';
        $body = sprintf("%x\r\n%s\r\n", length $body, $body);
        $c->{stall} = 1;
    } elsif ($V{'chunk-no-crlf'} || $V{'chunk-size-off'}) {
        push @h, 'Transfer-Encoding: chunked';
        my $off = $V{'chunk-size-off'} ? 2 : 0;
        my $end = $V{'chunk-no-crlf'} ? 'XY' : "\r\n";
        my $chunks = '';
        for (my $i = 0; $i < length $body; $i += 7) {
            my $part = substr($body, $i, 7);
            $chunks .= sprintf("%x\r\n%s%s", length($part) + $off, $part, $end);
        }
        $body = $chunks . "0\r\n\r\n";
    } elsif ($V{'chunked-ext'}) {
        push @h, 'Transfer-Encoding: chunked', 'Trailer: X-Body-Bytes, X-Note';
        my $chunks = '';
        for (my $i = 0; $i < length $body; $i += 5) {
            my $part = substr($body, $i, 5);
            $chunks .= sprintf("%x;ext=1;q=\"a b\"\r\n%s\r\n", length $part, $part);
        }
        $body = $chunks . "0;last\r\nX-Body-Bytes: " . length($body) . "\r\nX-Note: done\r\n\r\n";
    } elsif ($V{'close-delimited'}) {
        $close = 1;
    } elsif ($V{'cl-long'}) {
        push @h, 'Content-Length: ' . (length($body) + 10);
        $c->{stall} = 1;
    } elsif ($V{'cl-short'}) {
        push @h, 'Content-Length: ' . length($body);
        $tail = "{\"x\":1}\r\n";
    } elsif ($V{'dup-cl'}) {
        push @h, 'Content-Length: ' . length($body), 'Content-Length: ' . (length($body) + 1);
    } elsif ($V{'odd-headers'}) {
        push @h, "CONTENT-length:\t " . length($body) . '  ';
    } else {
        push @h, 'Content-Length: ' . length($body);
    }
    push @h, 'Connection: keep-alive' if $V{'http10-keepalive'} && !$close;
    push @h, 'Keep-Alive: timeout=1' if $V{'ka-timeout'} && !$close;
    push @h, 'Connection: close' if $close;
    push @h, 'x-SERVED-by:   perl  ' if $V{'odd-headers'};
    my $head = join($eol, @h) . $eol . $eol;
    my $pre = '';
    $pre .= "HTTP/1.1 100 Continue\r\n\r\n" if $V{continue};
    $pre .= "HTTP/1.1 103 Early Hints\r\nLink: </style.css>; rel=preload\r\nLink: </a.js>; rel=preload\r\n\r\n"
      if $V{'early-hints'};
    my $ok;
    if ($V{split}) {
        $ok = put($c, $pre . $head);
        sleep 0.03;
        $ok &&= put($c, $body . $tail);
    } else {
        $ok = put($c, $pre . $head . $body . $tail);
    }
    $c->{last} = time;
    return $ok && !$close;
}

sub handle {
    my ($c, $method, $path, $hdr, $body) = @_;
    $SERVED++;
    exit 3 if defined $EXIT && $SERVED > $EXIT;
    if (defined $DEAF && $SERVED > $DEAF) {
        $c->{stall} = 1;
        return 1;
    }
    if ($method ne 'POST') {
        my $b = $JSON->encode({ messages => [msg('Only POST is answered here.', 'system')] });
        my $h = "HTTP/1.1 405 Method Not Allowed\r\nAllow: POST\r\nContent-Type: application/json\r\n";
        if ($method eq 'HEAD') {
            put($c, $h . "Content-Length: " . length($b) . "\r\n\r\n");
        } else {
            put($c, $h . "Content-Length: " . length($b) . "\r\n\r\n" . $b);
        }
        $c->{last} = time;
        return 1;
    }
    if (length $KEY && ($hdr->{'x-sidebridge-key'} // "\0") ne $KEY) {
        return reply($c, 401,
            { messages => [msg('Wrong or missing key.', 'system')], options => { endSession => JSON::PP::true } }, 1);
    }
    my $req = eval { $JSON->decode($body) };
    if (!defined $req && $V{'hang-malformed'}) {
        $c->{stall} = 1;
        return 1;
    }
    sleep 3 if $V{'slow-first'} && !$SLOWED++;
    if (ref $req ne 'HASH' || !defined $req->{chatId} || ref $req->{chatId}) {
        return reply($c, 400,
            { messages => [msg('Bad request.', 'system')], options => { endSession => JSON::PP::true } }, 1);
    }
    return reply($c, 200, answer(uc $req->{chatId}, $req), 1);
}

# Parses every whole request in the connection's buffer; false when the connection is to close.
sub serve {
    my ($c) = @_;
    while (1) {
        my $end = index($c->{buf}, "\r\n\r\n");
        return 1 if $end < 0;
        my $head = substr($c->{buf}, 0, $end);
        my ($line, @lines) = split /\r\n/, $head;
        my ($method, $path) = split / /, $line;
        my %hdr;
        for (@lines) {
            my ($k, $v) = /^([^:]+):\s*(.*?)\s*$/ or next;
            $hdr{lc $k} = $v;
        }
        my $len = $hdr{'content-length'} // 0;
        return 1 if length($c->{buf}) < $end + 4 + $len;
        my $body = substr($c->{buf}, $end + 4, $len);
        substr($c->{buf}, 0, $end + 4 + $len) = '';
        if ($V{'ka-timeout'} && defined $c->{last} && time - $c->{last} >= 1) {
            return 0;    # the idle close won the race: the request is not answered
        }
        my $keep = handle($c, $method // '', $path, \%hdr, $body);
        return 0 unless $keep;
        return 1 if $c->{stall};
        return 0 if lc($hdr{connection} // '') eq 'close';
    }
}

my $listen = IO::Socket::INET->new(LocalAddr => '127.0.0.1', LocalPort => 0, Listen => 64,
    ReuseAddr => 1, Proto => 'tcp') or die "listen: $!\n";
$| = 1;
print 'http://127.0.0.1:' . $listen->sockport . "/\n";
my $sel = IO::Select->new($listen);

sub drop {
    my ($s) = @_;
    $sel->remove($s);
    delete $CONN{ fileno $s };
    close $s;
}

while (1) {
    for my $s ($sel->can_read(0.05)) {
        if ($s == $listen) {
            my $n = $listen->accept or next;
            $sel->add($n);
            $CONN{ fileno $n } = { sock => $n, buf => '' };
            next;
        }
        my $c = $CONN{ fileno $s } or next;
        my $got = sysread($s, my $chunk, 65536);
        if (!$got) { drop($s); next; }
        next if $c->{stall};
        $c->{buf} .= $chunk;
        drop($s) unless serve($c);
    }
    my $now = time;
    for my $c (values %CONN) {
        next if $c->{stall} || !defined $c->{last} || length $c->{buf};
        if ($V{'ka-timeout'} && $now - $c->{last} >= 1.3) {
            drop($c->{sock});
        } elsif ($V{'idle-408'} && $now - $c->{last} >= 0.3) {
            put($c, "HTTP/1.1 408 Request Timeout\r\nConnection: close\r\nContent-Length: 0\r\n\r\n");
            drop($c->{sock});
        }
    }
}
