package adk

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"iter"
	"maps"
	"math"
	"regexp"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"
	"weak"

	"github.com/ctxwarden/ctxwarden/client/go/ctxwarden"
	"github.com/ctxwarden/ctxwarden/client/go/ctxwardenv1"
	"google.golang.org/adk/v2/platform"
	"google.golang.org/adk/v2/session"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/types/known/structpb"
)

// Namespace is the default first part of the ctxwarden session IDs of ADK
// sessions (see SessionKey), the one the Python adapter uses too.
const Namespace = "adk"

// UpdateTimeKey is the session-state key of an ADK session's last update time
// (the newest event's timestamp, in Unix seconds); it is left out of the state
// ADK sees.
const UpdateTimeKey = "ctxwarden:last_update_time"

var (
	// ErrSessionNotFound is wrapped by the errors of Get and AppendEvent for a
	// session that does not exist (or was deleted).
	ErrSessionNotFound = errors.New("session not found")
	// ErrStaleSession is wrapped by the error of AppendEvent when the session
	// changed in storage since it was read (another writer appended): nothing
	// was stored; get the session again and go on from there.
	ErrStaleSession = errors.New("the session has been modified in storage since it was loaded; reload it before appending more events")
)

// SessionService is ADK's session.Service over ctxwarden.
//
// An ADK session (app, user, session) is the ctxwarden session
// SessionKey(namespace, app, user, session) with project_id = project prefix
// + app and user_id = user. Its events are messages, one each (see
// EventToMessages). Its state goes to ctxwarden's three states, atomically
// with the event's message: "app:" keys (prefix removed) to the project state,
// shared by the app's sessions; "user:" keys to the user state, shared by the
// user's sessions of the app; the other keys to the session's own state;
// "temp:" keys are never stored (they reach the live session object only, as
// with ADK's own services). Get returns them merged, with their prefixes.
// State values are stored as JSON (google.protobuf.Struct): numbers come back
// as float64, other types as their JSON form, and a nil value deletes its key.
//
// A session Get or Create returns carries ctxwarden's last_seq as its revision;
// AppendEvent appends with expected_last_seq = that revision, so an append to a
// session that changed since it was read fails with ErrStaleSession and
// stores nothing. Each append has request_id "adk:" + the event's ID, so a
// retry after a lost answer is answered from the server's request log rather
// than stored twice.
//
// ADK still builds each model request from all the session's events: for
// ctxwarden's effective context (compaction, truncated tool outputs) to reach
// the model, add a ContextPlugin.
//
// Safe for concurrent use; the client stays the caller's.
type SessionService struct {
	client        ctxwardenv1.ContextServiceClient
	template      *ctxwardenv1.Session
	namespace     string
	projectPrefix string

	mu   sync.Mutex
	live map[string]weak.Pointer[Session] // key -> the session object returned last
}

// Option configures a SessionService.
type Option func(*SessionService)

// WithTemplate gives new sessions their ctxwarden settings (model, policy,
// system prompt, labels); session ID, user, project and state are set by Create.
func WithTemplate(template *ctxwardenv1.Session) Option {
	return func(s *SessionService) { s.template = proto.Clone(template).(*ctxwardenv1.Session) }
}

// WithNamespace sets the first part of the session IDs (default Namespace):
// services with different namespaces do not see each other's sessions.
func WithNamespace(namespace string) Option {
	return func(s *SessionService) { s.namespace = namespace }
}

// WithProjectPrefix puts prefix in front of the app name in the sessions'
// project_id (so the project state is per prefix and app).
func WithProjectPrefix(prefix string) Option {
	return func(s *SessionService) { s.projectPrefix = prefix }
}

// NewSessionService returns the session service over client (e.g. a
// *ctxwarden.Client). It fails only for an invalid namespace.
func NewSessionService(client ctxwardenv1.ContextServiceClient, opts ...Option) (*SessionService, error) {
	s := &SessionService{client: client, template: &ctxwardenv1.Session{}, namespace: Namespace,
		live: map[string]weak.Pointer[Session]{}}
	for _, opt := range opts {
		opt(s)
	}
	if _, err := SessionKey(s.namespace); err != nil {
		return nil, err
	}
	return s, nil
}

var _ session.Service = (*SessionService)(nil)

// Client returns the ctxwarden client the service was made with.
func (s *SessionService) Client() ctxwardenv1.ContextServiceClient { return s.client }

// Key returns the ctxwarden session ID of an ADK session.
func (s *SessionService) Key(appName, userID, sessionID string) string {
	key, _ := SessionKey(s.namespace, appName, userID, sessionID) // the namespace was checked
	return key
}

// Create creates a session; it fails if the session exists.
func (s *SessionService) Create(ctx context.Context, req *session.CreateRequest) (*session.CreateResponse, error) {
	if req.AppName == "" || req.UserID == "" {
		return nil, fmt.Errorf("ctxwarden adk: app_name and user_id are required, got app_name: %q, user_id: %q", req.AppName, req.UserID)
	}
	sid := strings.TrimSpace(req.SessionID)
	if sid == "" {
		sid = platform.NewUUID(ctx)
	}
	appDelta, userDelta, sessionState, err := splitState(req.State)
	if err != nil {
		return nil, err
	}
	sessionState[UpdateTimeKey] = unixSeconds(platform.Now(ctx))
	state, err := structpb.NewStruct(sessionState)
	if err != nil {
		return nil, fmt.Errorf("ctxwarden adk: session state: %w", err)
	}
	key := s.Key(req.AppName, req.UserID, sid)
	fresh := proto.Clone(s.template).(*ctxwardenv1.Session)
	fresh.ProjectId, fresh.UserId, fresh.State = s.projectPrefix+req.AppName, req.UserID, state
	if _, err := s.client.CreateSession(ctx, &ctxwardenv1.CreateSessionRequest{Session: fresh, SessionId: key}); err != nil {
		if status.Code(err) == codes.AlreadyExists {
			return nil, fmt.Errorf("ctxwarden adk: session %s already exists: %w", sid, err)
		}
		return nil, fmt.Errorf("ctxwarden adk: create session %s: %w", sid, err)
	}
	if len(appDelta) > 0 || len(userDelta) > 0 {
		delta, err := stateDelta(nil, userDelta, appDelta)
		if err != nil {
			return nil, err
		}
		if _, err := s.client.AppendMessages(ctx, &ctxwardenv1.AppendMessagesRequest{SessionId: key, StateDelta: delta}); err != nil {
			return nil, fmt.Errorf("ctxwarden adk: the app and user state of session %s: %w", sid, err)
		}
	}
	stored, err := s.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: key})
	if err != nil {
		return nil, fmt.Errorf("ctxwarden adk: get session %s: %w", sid, err)
	}
	return &session.CreateResponse{Session: s.track(key, newSession(req.AppName, req.UserID, sid, stored, nil))}, nil
}

// Get returns a session with its events (the newest NumRecentEvents, of those
// the ones not before After, when set).
func (s *SessionService) Get(ctx context.Context, req *session.GetRequest) (*session.GetResponse, error) {
	if req.AppName == "" || req.UserID == "" || req.SessionID == "" {
		return nil, fmt.Errorf("ctxwarden adk: app_name, user_id, session_id are required, got app_name: %q, user_id: %q, session_id: %q",
			req.AppName, req.UserID, req.SessionID)
	}
	key := s.Key(req.AppName, req.UserID, req.SessionID)
	stored, err := s.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: key})
	if err != nil {
		return nil, notFoundOr(err, req.SessionID)
	}
	events, err := s.events(ctx, key, req.NumRecentEvents, req.After)
	if err != nil {
		return nil, notFoundOr(err, req.SessionID)
	}
	return &session.GetResponse{Session: s.track(key, newSession(req.AppName, req.UserID, req.SessionID, stored, events))}, nil
}

func (s *SessionService) events(ctx context.Context, key string, recent int, after time.Time) ([]*session.Event, error) {
	var messages []*ctxwardenv1.Message
	req := &ctxwardenv1.ListMessagesRequest{SessionId: key, PageSize: 1000}
	if recent > 0 {
		req.NewestFirst = true
		req.PageSize = int32(min(recent+recent/2+1, 1000))
	}
	heads := 0
pages:
	for {
		page, err := s.client.ListMessages(ctx, req)
		if err != nil {
			return nil, err
		}
		for _, m := range page.GetMessages() {
			messages = append(messages, m)
			if m.GetMetadata()[EventEnvelopeKey] != "" {
				if heads++; recent > 0 && heads == recent {
					break pages // newest first: the event's other messages came before it
				}
			}
		}
		if page.GetNextPageToken() == "" {
			break
		}
		req.PageToken = page.GetNextPageToken()
	}
	if recent > 0 {
		slices.Reverse(messages)
	}
	all, err := EventsOf(messages)
	if err != nil {
		return nil, err
	}
	events := make([]*session.Event, 0, len(all))
	for _, e := range all {
		if after.IsZero() || !e.Timestamp.Before(after) {
			events = append(events, e)
		}
	}
	return events, nil
}

// List returns the sessions of an app (of one user when UserID is set),
// without their events, oldest update first.
func (s *SessionService) List(ctx context.Context, req *session.ListRequest) (*session.ListResponse, error) {
	if req.AppName == "" {
		return nil, fmt.Errorf("ctxwarden adk: app_name is required, got app_name: %q", req.AppName)
	}
	shared := map[string]*ctxwardenv1.Session{} // user -> a session with the user's and the app's state
	sessions := []*Session{}
	list := &ctxwardenv1.ListSessionsRequest{UserId: req.UserID, ProjectId: s.projectPrefix + req.AppName, PageSize: 1000}
	for {
		page, err := s.client.ListSessions(ctx, list)
		if err != nil {
			return nil, fmt.Errorf("ctxwarden adk: list sessions: %w", err)
		}
		for _, stored := range page.GetSessions() {
			namespace, parts, err := SplitSessionKey(stored.GetSessionId())
			if err != nil || namespace != s.namespace || len(parts) != 3 || parts[0] != req.AppName ||
				req.UserID != "" && parts[1] != req.UserID {
				continue
			}
			user := parts[1]
			if shared[user] == nil { // the shared states come with GetSession only
				full, err := s.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: stored.GetSessionId()})
				if status.Code(err) == codes.NotFound {
					continue // deleted meanwhile
				} else if err != nil {
					return nil, fmt.Errorf("ctxwarden adk: get session: %w", err)
				}
				shared[user] = full
			}
			stored.UserState, stored.ProjectState = shared[user].GetUserState(), shared[user].GetProjectState()
			sessions = append(sessions, newSession(req.AppName, user, parts[2], stored, nil))
		}
		if page.GetNextPageToken() == "" {
			break
		}
		list.PageToken = page.GetNextPageToken()
	}
	sort.SliceStable(sessions, func(i, j int) bool { return sessions[i].updated.Before(sessions[j].updated) })
	out := make([]session.Session, len(sessions))
	for i, x := range sessions {
		out[i] = x
	}
	return &session.ListResponse{Sessions: out}, nil
}

// Delete deletes a session; deleting one that does not exist is no error.
func (s *SessionService) Delete(ctx context.Context, req *session.DeleteRequest) error {
	if req.AppName == "" || req.UserID == "" || req.SessionID == "" {
		return fmt.Errorf("ctxwarden adk: app_name, user_id, session_id are required, got app_name: %q, user_id: %q, session_id: %q",
			req.AppName, req.UserID, req.SessionID)
	}
	key := s.Key(req.AppName, req.UserID, req.SessionID)
	s.mu.Lock()
	delete(s.live, key)
	s.mu.Unlock()
	_, err := s.client.DeleteSession(ctx, &ctxwardenv1.DeleteSessionRequest{SessionId: key})
	if err != nil && status.Code(err) != codes.NotFound {
		return fmt.Errorf("ctxwarden adk: delete session %s: %w", req.SessionID, err)
	}
	return nil
}

// track remembers sess as the live object of key: the one whose events a
// ContextPlugin matches (ADK's callback contexts do not give the session).
// It is held weakly: a session object no one uses any more is forgotten.
func (s *SessionService) track(key string, sess *Session) *Session {
	s.mu.Lock()
	s.live[key] = weak.Make(sess)
	s.mu.Unlock()
	ptr := weak.Make(sess)
	runtime.AddCleanup(sess, func(key string) {
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.live[key] == ptr {
			delete(s.live, key)
		}
	}, key)
	return sess
}

// liveSession returns the session object Get or Create returned last for
// key, or nil when there is none (any more).
func (s *SessionService) liveSession(key string) *Session {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.live[key].Value()
}

var requestIDPattern = regexp.MustCompile(`^[!-~]{1,124}$`)

// AppendEvent stores a (non-partial) event and its state delta in one
// AppendMessages, then adds the event (without its "temp:" keys) to the
// session object and applies the whole delta to the object's state. For a
// session object this service did not return, the stored session's revision
// is read first (and the append refused as stale when storage has newer
// events than the object's LastUpdateTime); such an object is not updated.
func (s *SessionService) AppendEvent(ctx context.Context, curSession session.Session, event *session.Event) error {
	if curSession == nil {
		return fmt.Errorf("ctxwarden adk: session is nil")
	}
	if event == nil {
		return fmt.Errorf("ctxwarden adk: event is nil")
	}
	if event.Partial {
		return nil
	}
	stored := trimTempDelta(event)
	appDelta, userDelta, sessionDelta, err := splitState(event.Actions.StateDelta)
	if err != nil {
		return err
	}
	updated := event.Timestamp
	if updated.IsZero() {
		updated = platform.Now(ctx)
	}
	sessionDelta[UpdateTimeKey] = unixSeconds(updated)
	delta, err := stateDelta(sessionDelta, userDelta, appDelta)
	if err != nil {
		return err
	}
	messages, err := EventToMessages(stored)
	if err != nil {
		return err
	}
	key := s.Key(curSession.AppName(), curSession.UserID(), curSession.ID())
	own, isOwn := curSession.(*Session)
	var expected int64
	if isOwn {
		expected = own.LastSeq()
	} else if expected, err = s.currentSeq(ctx, key, curSession); err != nil {
		return err
	}
	req := &ctxwardenv1.AppendMessagesRequest{
		SessionId:       key,
		Messages:        messages,
		ExpectedLastSeq: &expected,
		StateDelta:      delta,
		View:            ctxwardenv1.MessageView_MESSAGE_VIEW_BASIC,
	}
	if requestIDPattern.MatchString(event.ID) {
		req.RequestId = "adk:" + event.ID
	}
	resp, err := s.client.AppendMessages(ctx, req)
	switch {
	case err == nil:
	case ctxwarden.ErrorReason(err) == "LAST_SEQ_MISMATCH":
		return fmt.Errorf("ctxwarden adk: session %s: %w (%v)", curSession.ID(), ErrStaleSession, err)
	default:
		return notFoundOr(err, curSession.ID())
	}
	if isOwn {
		own.appendEvent(stored, event.Actions.StateDelta, resp.GetLastSeq(), updated)
	}
	return nil
}

// currentSeq returns the stored revision of a session object this service did
// not make: the stored one, unless storage moved past the object's LastUpdateTime.
func (s *SessionService) currentSeq(ctx context.Context, key string, sess session.Session) (int64, error) {
	stored, err := s.client.GetSession(ctx, &ctxwardenv1.GetSessionRequest{SessionId: key})
	if err != nil {
		return 0, notFoundOr(err, sess.ID())
	}
	if v, ok := stored.GetState().GetFields()[UpdateTimeKey]; ok &&
		v.GetNumberValue() > unixSeconds(sess.LastUpdateTime())+1e-3 {
		return 0, fmt.Errorf("ctxwarden adk: session %s: %w", sess.ID(), ErrStaleSession)
	}
	return stored.GetLastSeq(), nil
}

func notFoundOr(err error, sid string) error {
	if status.Code(err) == codes.NotFound {
		return fmt.Errorf("ctxwarden adk: session %s: %w (%v)", sid, ErrSessionNotFound, err)
	}
	return fmt.Errorf("ctxwarden adk: session %s: %w", sid, err)
}

// trimTempDelta returns event, or a copy without the "temp:" keys of its state delta.
func trimTempDelta(event *session.Event) *session.Event {
	delta := event.Actions.StateDelta
	if !slices.ContainsFunc(slices.Collect(maps.Keys(delta)), isTemp) {
		return event
	}
	trimmed := make(map[string]any, len(delta))
	for k, v := range delta {
		if !isTemp(k) {
			trimmed[k] = v
		}
	}
	c := *event
	c.Actions.StateDelta = trimmed
	return &c
}

func isTemp(key string) bool { return strings.HasPrefix(key, session.KeyPrefixTemp) }

// splitState splits an ADK state (delta) into the app, user and session parts
// (prefixes removed, "temp:" keys dropped), each value as JSON would give it back.
func splitState(state map[string]any) (app, user, sess map[string]any, err error) {
	app, user, sess = map[string]any{}, map[string]any{}, map[string]any{}
	for key, value := range state {
		var plain any
		if b, err := json.Marshal(value); err != nil {
			return nil, nil, nil, fmt.Errorf("ctxwarden adk: state key %q: the value is not JSON: %w", key, err)
		} else if err := json.Unmarshal(b, &plain); err != nil {
			return nil, nil, nil, fmt.Errorf("ctxwarden adk: state key %q: %w", key, err)
		}
		if k, ok := strings.CutPrefix(key, session.KeyPrefixApp); ok {
			app[k] = plain
		} else if k, ok := strings.CutPrefix(key, session.KeyPrefixUser); ok {
			user[k] = plain
		} else if !isTemp(key) {
			sess[key] = plain
		}
	}
	return app, user, sess, nil
}

func stateDelta(sess, user, project map[string]any) (*ctxwardenv1.StateDelta, error) {
	delta := &ctxwardenv1.StateDelta{}
	for _, part := range []struct {
		values map[string]any
		to     **structpb.Struct
	}{{sess, &delta.Session}, {user, &delta.User}, {project, &delta.Project}} {
		if len(part.values) == 0 {
			continue
		}
		s, err := structpb.NewStruct(part.values)
		if err != nil {
			return nil, fmt.Errorf("ctxwarden adk: state delta: %w", err)
		}
		*part.to = s
	}
	return delta, nil
}

func unixSeconds(t time.Time) float64 { return float64(t.UnixMicro()) / 1e6 }

func fromUnixSeconds(s float64) time.Time {
	sec, frac := math.Modf(s)
	return time.Unix(int64(sec), int64(math.Round(frac*1e6))*1e3)
}

// Session is the session.Session of SessionService: what was read from
// ctxwarden, updated by each AppendEvent. Safe for concurrent use.
type Session struct {
	appName, userID, id string

	mu      sync.RWMutex
	state   map[string]any
	events  []*session.Event
	updated time.Time
	lastSeq int64
}

var _ session.Session = (*Session)(nil)

func newSession(app, user, sid string, stored *ctxwardenv1.Session, events []*session.Event) *Session {
	state := map[string]any{}
	for k, v := range stored.GetState().AsMap() {
		if k != UpdateTimeKey {
			state[k] = v
		}
	}
	for k, v := range stored.GetProjectState().AsMap() {
		state[session.KeyPrefixApp+k] = v
	}
	for k, v := range stored.GetUserState().AsMap() {
		state[session.KeyPrefixUser+k] = v
	}
	updated := stored.GetCreateTime().AsTime()
	if v, ok := stored.GetState().GetFields()[UpdateTimeKey]; ok {
		updated = fromUnixSeconds(v.GetNumberValue())
	}
	return &Session{appName: app, userID: user, id: sid, state: state, events: events,
		updated: updated, lastSeq: stored.GetLastSeq()}
}

func (s *Session) appendEvent(stored *session.Event, delta map[string]any, lastSeq int64, updated time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	maps.Copy(s.state, delta)
	s.events = append(s.events, stored)
	s.lastSeq, s.updated = lastSeq, updated
}

// ID returns the session's ADK ID.
func (s *Session) ID() string { return s.id }

// AppName returns the session's app.
func (s *Session) AppName() string { return s.appName }

// UserID returns the session's user.
func (s *Session) UserID() string { return s.userID }

// State returns the session's state: its own keys, the app's ("app:") and the
// user's ("user:"), and the "temp:" keys of this object's appended events.
func (s *Session) State() session.State { return &state{s} }

// Events returns the session's events as read, then appended.
func (s *Session) Events() session.Events {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return events(s.events[:len(s.events):len(s.events)])
}

// LastUpdateTime returns the timestamp of the newest event (the creation time
// for a session without events).
func (s *Session) LastUpdateTime() time.Time {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.updated
}

// LastSeq returns the ctxwarden last_seq of the session as this object knows
// it: the revision AppendEvent expects.
func (s *Session) LastSeq() int64 {
	s.mu.RLock()
	defer s.mu.RUnlock()
	return s.lastSeq
}

type state struct{ s *Session }

func (st *state) Get(key string) (any, error) {
	st.s.mu.RLock()
	defer st.s.mu.RUnlock()
	v, ok := st.s.state[key]
	if !ok {
		return nil, session.ErrStateKeyNotExist
	}
	return v, nil
}

func (st *state) Set(key string, value any) error {
	st.s.mu.Lock()
	defer st.s.mu.Unlock()
	st.s.state[key] = value
	return nil
}

func (st *state) All() iter.Seq2[string, any] {
	st.s.mu.RLock()
	snapshot := maps.Clone(st.s.state)
	st.s.mu.RUnlock()
	return maps.All(snapshot)
}

type events []*session.Event

func (e events) All() iter.Seq[*session.Event] { return slices.Values(e) }
func (e events) Len() int                      { return len(e) }
func (e events) At(i int) *session.Event {
	if i >= 0 && i < len(e) {
		return e[i]
	}
	return nil
}
