#!/usr/bin/perl
# A bb provider bridge in Perl (core modules only; JSON::PP), written from the protocol document
# (/work/shared/protocols, bb provider bridge) for the bbq audit: not bridgewire's code, not
# Python, not Node. It speaks to the same provider as tests/peers/bb-audit/provider.py
# (initialize, session/new, session/load, session/prompt requests, session/cancel; the provider
# streams session/update {text} and answers the prompt with {stopReason}), so it replays the
# committed cells tests/peers/bb-audit/audit/{basic,interrupt} and its own cell
# tests/fixtures/bb-perl-cells/.
#
# Usage: bridge.pl [--mode M[,M2]]   (or env PERL_BB_MODE). Provider command: $BB_REF_PROVIDER_COMMAND.
#
# Correct by default. Legal but unusual (each leaves the timeline as the default builds it):
#   spaces      JSON with insignificant whitespace (`{ "jsonrpc" : "2.0", … }`)
#   keyorder    keys in sorted order (`id`, `jsonrpc`, `result`: `jsonrpc` not first)
#   escapes     every non-ASCII character as a `\u00e9` escape (default: literal UTF-8)
#   floats      numbers written `2.0`: protocolVersion, grammarVersions, response ids
#   dribble     every line written in 5-byte pieces, a sleep between some (lines split mid-line)
#   interleave  turn/start's deltas written before its response (notifications between a
#               request and its answer)
#   ext         unknown fields in results, params and deltas; an unknown notification per turn
#   chatter     lots of stderr, some of it not UTF-8
#   long-line   a 4 MiB unknown notification per turn (ignored by the runtime)
#   crlf        `\r\n` line ends (the runtime's framing strips one trailing `\r`)
#   stamp       a failed prompt's provider.error names the bridge's clock, the time it took,
#               its pid and its temp folder (`provider failed at 2026-12-07T01:02:03Z after
#               41 ms (pid 4242, log /tmp/bb-perl-Xa9/err.log): …`); default: the provider's
#               message alone
# Flaws:
#   both        turn/start answered with both `result` and `error`
#   unknown-id  a response to an id the runtime never sent, after each turn/start answer
#   settle-twice  a turn settled twice (`turn.boundary` again: the grammar's turn/settles-once)
#   reworded    with stamp: the error worded otherwise (`provider crashed at …`)
#   deaf-after-turn  once the first turn has settled, every line the runtime writes is read and
#               none is answered (a bridge whose stdin reader deadlocked; it stays alive)
#   exit-on-stop  exits with status 3 on the first thread/stop, whatever its params
use strict;
use warnings;
use IO::Handle;
use IO::Select;
use JSON::PP;
use POSIX qw(strftime :sys_wait_h);
use Time::HiRes qw(time sleep);
use File::Temp qw(tempdir);

my %MODE;
$MODE{$_} = 1 for grep { length } split /,/, ($ENV{PERL_BB_MODE} // '');
for my $i (0 .. $#ARGV) {
    if ($ARGV[$i] eq '--mode' && defined $ARGV[$i + 1]) {
        $MODE{$_} = 1 for grep { length } split /,/, $ARGV[$i + 1];
    }
}
sub M { $MODE{ $_[0] } }
my $DEAF = 0;    # deaf-after-turn: set once the first turn has settled

$SIG{PIPE} = 'IGNORE';
binmode STDIN;
binmode STDOUT;
binmode STDERR;
STDOUT->autoflush(1);
STDERR->autoflush(1);

my $json_in = JSON::PP->new->utf8->allow_nonref;
my $json_out = JSON::PP->new->utf8;
$json_out->canonical(1) if M('keyorder');
$json_out->ascii(1) if M('escapes');
$json_out->space_before(1)->space_after(1) if M('spaces');
my $json_plain = JSON::PP->new->utf8;
my $EOL = M('crlf') ? "\r\n" : "\n";
my $TEMP = tempdir('bb-perl-XXXXXX', TMPDIR => 1, CLEANUP => 1);

sub chatter {
    return unless M('chatter');
    my ($what) = @_;
    for (1 .. 20) {
        print STDERR "[perl-bridge] $what: chatter line $_ \xff\xfe not utf-8 \xc3(\n";
    }
}

sub write_line {
    my ($bytes) = @_;
    my $data = $bytes . $EOL;
    if (M('dribble')) {
        my $n = 0;
        for (my $i = 0; $i < length $data; $i += 5) {
            syswrite_all(substr($data, $i, 5));
            sleep(0.001) if ++$n % 40 == 0;
        }
    } else {
        syswrite_all($data);
    }
}

sub syswrite_all {
    my ($data) = @_;
    while (length $data) {
        my $n = syswrite(STDOUT, $data);
        exit 0 unless defined $n;
        substr($data, 0, $n) = '';
    }
}

sub send_msg {
    my ($obj) = @_;
    chatter('sending ' . ($obj->{method} // 'a response'));
    # jsonrpc first unless keyorder says otherwise: JSON::PP keeps no order, so the envelope
    # is written by hand around the encoded members.
    my $text;
    if (M('keyorder')) {
        $text = $json_out->encode($obj);
    } else {
        my @keys = grep { exists $obj->{$_} } qw(jsonrpc id method params result error);
        push @keys, grep { my $k = $_; !grep { $_ eq $k } @keys } sort keys %$obj;
        my ($c, $s) = M('spaces') ? (' : ', ' , ') : (':', ',');
        $text = '{' . join($s, map { $json_out->encode([$_]) =~ s/^\[\s*(.*?)\s*\]$/$1/sr . $c . $json_out->encode([$obj->{$_}]) =~ s/^\[\s*(.*)\s*\]$/$1/sr } @keys) . '}';
    }
    if (M('floats')) {
        $text =~ s/("id"\s*:\s*)(\d+)(?=\s*[,}])/$1$2.0/ if !exists $obj->{method};
        $text =~ s/("protocolVersion"\s*:\s*)(\d+)/$1$2.0/;
        $text =~ s/("grammarVersions"\s*:\s*\[\s*)(\d+)(\s*,\s*)(\d+)/$1$2.0$3$4.0/;
    }
    write_line($text);
}

sub respond {
    my ($id, $result) = @_;
    my $r = { jsonrpc => '2.0', id => $id, result => $result };
    $r->{'x-perl'} = { note => 'an unknown member' } if M('ext');
    send_msg($r);
}

sub respond_err {
    my ($id, $code, $message) = @_;
    send_msg({ jsonrpc => '2.0', id => $id, error => { code => $code, message => $message } });
}

sub notify {
    my ($method, $params) = @_;
    $params = { %$params, xPerlExtension => { v => 1 } } if M('ext');
    send_msg({ jsonrpc => '2.0', method => $method, params => $params });
}

sub deltas {
    my ($tid, @ds) = @_;
    @ds = map { { %$_, xPerlField => JSON::PP::true } } @ds if M('ext');
    notify('thread/delta', { threadId => $tid, deltas => \@ds });
}

# ---- provider children, one per thread ----
my %threads;    # tid -> {pid, in, out, buf, pending{id => cb}, next, handle, turn, stop_id, text, started}
my %by_fd;      # fileno of a provider's stdout -> tid
my $sel = IO::Select->new(\*STDIN);

sub spawn_provider {
    my ($th) = @_;
    my $cmd = $ENV{BB_REF_PROVIDER_COMMAND} or return 0;
    pipe(my $child_in_r, my $child_in_w) or return 0;
    pipe(my $child_out_r, my $child_out_w) or return 0;
    my $pid = fork();
    return 0 unless defined $pid;
    if ($pid == 0) {
        open STDIN, '<&', $child_in_r;
        open STDOUT, '>&', $child_out_w;
        close $child_in_w;
        close $child_out_r;
        $ENV{BRIDGEWIRE_RECORD_THREAD} = $th->{tid};
        delete $ENV{PERL_BB_MODE};
        exec '/bin/sh', '-c', "exec $cmd" or POSIX::_exit(127);
    }
    close $child_in_r;
    close $child_out_w;
    binmode $child_in_w;
    binmode $child_out_r;
    $child_in_w->autoflush(1);
    @$th{qw(pid in out buf next)} = ($pid, $child_in_w, $child_out_r, '', 1);
    $th->{pending} = {};
    $by_fd{ fileno $child_out_r } = $th->{tid};
    $sel->add($child_out_r);
    return 1;
}

sub prov_send {
    my ($th, $obj) = @_;
    return unless $th->{in};
    print { $th->{in} } $json_plain->encode($obj) . "\n";
}

sub prov_request {
    my ($th, $method, $params, $cb) = @_;
    my $id = $th->{next}++;
    $th->{pending}{$id} = $cb;
    prov_send($th, { jsonrpc => '2.0', id => $id, method => $method, params => $params });
}

sub release_provider {
    my ($th) = @_;
    return unless $th->{pid};
    $sel->remove($th->{out});
    delete $by_fd{ fileno $th->{out} };
    close $th->{in};
    close $th->{out};
    my $deadline = time + 2;
    while (time < $deadline) {
        last if waitpid($th->{pid}, WNOHANG) != 0;
        sleep(0.01);
    }
    if (waitpid($th->{pid}, WNOHANG) == 0) {
        kill 'KILL', $th->{pid};
        waitpid($th->{pid}, 0);
    }
    delete @$th{qw(pid in out)};
}

# ---- runtime requests ----
sub open_session {
    my ($id, $p, $method) = @_;
    my $tid = $p->{threadId};
    unless (defined $tid && !ref $tid && length $tid) {
        return respond_err($id, -32602, "$method: threadId is required");
    }
    my $th = $threads{$tid} //= { tid => $tid, text => '' };
    release_provider($th);
    spawn_provider($th) or return respond_err($id, -32000, 'cannot start the provider');
    prov_request($th, 'initialize', { client => 'perl-bridge' }, sub {
        my $after = sub {
            my ($m) = @_;
            if ($m->{error} || !ref $m->{result}) {
                return respond_err($id, -32000, 'provider refused the session');
            }
            my $handle = $m->{result}{sessionId};
            $th->{handle} = $handle;
            notify('thread/identity', { threadId => $tid, providerThreadId => $handle, sessionRestorable => JSON::PP::true });
            deltas($tid, { kind => 'session.reset' });
            respond($id, { providerThreadId => $handle, sessionRestorable => JSON::PP::true });
        };
        if ($method eq 'thread/resume') {
            prov_request($th, 'session/load', { sessionId => $p->{providerThreadId}, cwd => $p->{cwd} }, $after);
        } else {
            prov_request($th, 'session/new', { cwd => $p->{cwd} }, $after);
        }
    });
}

sub finish_turn {
    my ($th, $status, $error) = @_;
    my @ds;
    push @ds, { kind => 'item.textClose', key => { channel => 'assistant' }, channel => 'agentMessage', text => $th->{text} }
        if $th->{text} =~ /\S/;
    push @ds, { kind => 'provider.error', message => $error } if defined $error;
    push @ds, { kind => 'turn.boundary', status => $status };
    push @ds, { kind => 'turn.boundary', status => $status } if M('settle-twice');
    $th->{text} = '';
    $th->{turn} = 0;
    deltas($th->{tid}, @ds);
}

sub error_text {
    my ($th, $m) = @_;
    my $msg = ref $m->{error} eq 'HASH' ? ($m->{error}{message} // 'unknown') : 'unknown';
    return $msg unless M('stamp');
    my $took = int((time - $th->{started}) * 1000);
    my $at = strftime('%Y-%m-%dT%H:%M:%SZ', gmtime);
    my $verb = M('reworded') ? 'crashed' : 'failed';
    return "provider $verb at $at after $took ms (pid $$, log $TEMP/err.log): $msg";
}

sub start_turn {
    my ($id, $p) = @_;
    my $tid = $p->{threadId} // '';
    my $th = $threads{$tid};
    return respond_err($id, -32602, "no session for thread $tid") unless $th && $th->{pid};
    my $text = join ' ', map { ref $_ eq 'HASH' && defined $_->{text} ? $_->{text} : () } @{ $p->{input} // [] };
    my @open = ({ kind => 'input.accepted', clientRequestId => $p->{clientRequestId} }, { kind => 'turn.open' });
    my $answer = sub {
        if (M('both')) {
            send_msg({ jsonrpc => '2.0', id => $id, result => {}, error => { code => -32000, message => 'both' } });
        } else {
            respond($id, {});
        }
        send_msg({ jsonrpc => '2.0', id => 987654321, result => {} }) if M('unknown-id');
    };
    if (M('interleave')) {
        deltas($tid, @open);
        $answer->();
    } else {
        $answer->();
        deltas($tid, @open);
    }
    if (M('ext')) {
        notify('x-perl/turnNote', { threadId => $tid, note => 'an unknown notification' });
    }
    if (M('long-line')) {
        notify('x-perl/padding', { threadId => $tid, pad => 'p' x (4 * 1024 * 1024) });
    }
    $th->{turn} = 1;
    $th->{started} = time;
    prov_request($th, 'session/prompt', { sessionId => $th->{handle}, text => $text }, sub {
        my ($m) = @_;
        return unless $th->{turn};
        if ($m->{error}) {
            finish_turn($th, 'failed', error_text($th, $m));
        } else {
            my $stop = ref $m->{result} eq 'HASH' ? ($m->{result}{stopReason} // '') : '';
            finish_turn($th, $stop eq 'cancelled' ? 'interrupted' : 'completed');
        }
        $DEAF = 1 if M('deaf-after-turn');
        if (defined(my $sid = delete $th->{stop_id})) {
            release_provider($th);
            respond($sid, {});
        }
    });
}

sub on_update {
    my ($th, $p) = @_;
    return unless $th->{turn};
    my $t = $p->{text} // '';
    $th->{text} .= $t;
    deltas($th->{tid}, { kind => 'item.textDelta', key => { channel => 'assistant' }, channel => 'agentMessage', text => $t });
}

sub stop {
    my ($id, $p) = @_;
    exit 3 if M('exit-on-stop');
    my $tid = $p->{threadId};
    my $intent = $p->{intent} // '';
    unless (defined $tid && !ref $tid && ($intent eq 'interrupt' || $intent eq 'release')) {
        return respond_err($id, -32602, 'thread/stop: threadId and intent (interrupt | release) are required');
    }
    my $th = $threads{$tid};
    return respond($id, {}) unless $th;
    if ($intent eq 'interrupt' && $th->{turn}) {
        $th->{stop_id} = $id;
        prov_send($th, { jsonrpc => '2.0', method => 'session/cancel', params => { sessionId => $th->{handle} } });
        return;
    }
    release_provider($th);
    respond($id, {});
}

sub handle_runtime_line {
    my ($line) = @_;
    return if $DEAF;
    my $m = eval { $json_in->decode($line) };
    return unless ref $m eq 'HASH';
    my ($method, $id) = ($m->{method}, $m->{id});
    return unless defined $method;                    # a response: we sent no request
    return unless defined $id;                        # a notification: none is ours
    my $p = ref $m->{params} eq 'HASH' ? $m->{params} : undef;
    if ($method eq 'initialize') {
        my %caps = (grammarVersions => [3, 3], sessionRestore => JSON::PP::true, threadArchive => JSON::PP::false,
            threadRename => JSON::PP::false, threadGoalClear => JSON::PP::false, fork => 'none',
            approvalEnforcedBy => 'runtime', steerMode => 'queue');
        $caps{xPerlCapability} = { enabled => JSON::PP::true } if M('ext');
        return respond($id, { protocolVersion => 2, capabilities => \%caps });
    }
    my %known = map { $_ => 1 } qw(thread/start thread/resume turn/start thread/stop);
    return respond_err($id, -32601, "method not found: $method") unless $known{$method};
    return respond_err($id, -32602, "$method: params must be an object") unless $p;
    if ($method eq 'thread/start' || $method eq 'thread/resume') {
        open_session($id, $p, $method);
    } elsif ($method eq 'turn/start') {
        start_turn($id, $p);
    } else {
        stop($id, $p);
    }
}

sub handle_provider_line {
    my ($th, $line) = @_;
    my $m = eval { $json_in->decode($line) };
    return unless ref $m eq 'HASH';
    if (defined $m->{method}) {
        on_update($th, $m->{params} // {}) if $m->{method} eq 'session/update';
        return;
    }
    my $cb = delete $th->{pending}{ $m->{id} // '' };
    $cb->($m) if $cb;
}

my $in_buf = '';
my $stdin_open = 1;
while ($stdin_open) {
    my @ready = $sel->can_read(5);
    for my $fh (@ready) {
        my $buf;
        my $n = sysread($fh, $buf, 1 << 20);
        if (fileno($fh) == fileno(STDIN)) {
            if (!$n) {
                $stdin_open = 0;
                last;
            }
            $in_buf .= $buf;
            while ((my $i = index($in_buf, "\n")) >= 0) {
                my $line = substr($in_buf, 0, $i + 1, '');
                chop $line;
                handle_runtime_line($line);
            }
        } else {
            my $tid = $by_fd{ fileno $fh } // next;
            my $th = $threads{$tid};
            if (!$n) {
                $sel->remove($fh);
                delete $by_fd{ fileno $fh };
                next;
            }
            $th->{buf} .= $buf;
            while ((my $i = index($th->{buf}, "\n")) >= 0) {
                my $line = substr($th->{buf}, 0, $i + 1, '');
                chop $line;
                handle_provider_line($th, $line);
            }
        }
    }
}
release_provider($_) for values %threads;
exit 0;
