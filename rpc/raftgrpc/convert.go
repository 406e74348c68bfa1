//lint:file-ignore SA1019 raft still fills and reads its deprecated Leader and Candidate fields, so the wire carries them.

package raftgrpc

import (
	"fmt"
	"math"
	"time"

	"github.com/hashicorp/raft"
	"google.golang.org/protobuf/types/known/timestamppb"

	"github.com/quorate/quorate/rpc/quoratev1"
)

// This file converts between raft's request and response structs and their
// protobuf mirrors in quoratev1, field by field. Requests gain the group id on
// the way out; responses carry none (a response answers its request).
// Decoders of requests return an error for values raft's types cannot hold,
// since they come from the network.

func encodeHeader(h raft.RPCHeader) *quoratev1.RaftHeader {
	return &quoratev1.RaftHeader{
		ProtocolVersion: int64(h.ProtocolVersion),
		Id:              h.ID,
		Addr:            h.Addr,
	}
}

func decodeHeader(h *quoratev1.RaftHeader) raft.RPCHeader {
	return raft.RPCHeader{
		ProtocolVersion: raft.ProtocolVersion(h.GetProtocolVersion()),
		ID:              h.GetId(),
		Addr:            h.GetAddr(),
	}
}

// encodeTime leaves a zero time unset: raft leaves AppendedAt zero on entries
// it did not stamp, and a zero time.Time is out of Timestamp's range anyway.
func encodeTime(t time.Time) *timestamppb.Timestamp {
	if t.IsZero() {
		return nil
	}
	return timestamppb.New(t)
}

func decodeTime(ts *timestamppb.Timestamp) time.Time {
	if ts == nil {
		return time.Time{}
	}
	return ts.AsTime()
}

func encodeLogs(logs []*raft.Log) []*quoratev1.RaftLog {
	if len(logs) == 0 {
		return nil
	}
	// One allocation for all messages, as decodeLogs does for all entries.
	msgs := make([]quoratev1.RaftLog, len(logs))
	out := make([]*quoratev1.RaftLog, len(logs))
	for i, l := range logs {
		m := &msgs[i]
		m.Index = l.Index
		m.Term = l.Term
		m.Type = uint32(l.Type)
		m.Data = l.Data
		m.Extensions = l.Extensions
		m.AppendedAt = encodeTime(l.AppendedAt)
		out[i] = m
	}
	return out
}

func decodeLogs(msgs []*quoratev1.RaftLog) ([]*raft.Log, error) {
	if len(msgs) == 0 {
		return nil, nil
	}
	logs := make([]raft.Log, len(msgs))
	out := make([]*raft.Log, len(msgs))
	for i, m := range msgs {
		if m.GetType() > math.MaxUint8 {
			return nil, fmt.Errorf("raftgrpc: log entry %d has type %d, beyond raft.LogType", m.GetIndex(), m.GetType())
		}
		logs[i] = raft.Log{
			Index:      m.GetIndex(),
			Term:       m.GetTerm(),
			Type:       raft.LogType(m.GetType()),
			Data:       m.GetData(),
			Extensions: m.GetExtensions(),
			AppendedAt: decodeTime(m.GetAppendedAt()),
		}
		out[i] = &logs[i]
	}
	return out, nil
}

func encodeAppendEntriesRequest(group string, r *raft.AppendEntriesRequest) *quoratev1.AppendEntriesRequest {
	return &quoratev1.AppendEntriesRequest{
		Group:             group,
		Header:            encodeHeader(r.RPCHeader),
		Term:              r.Term,
		Leader:            r.Leader,
		PrevLogEntry:      r.PrevLogEntry,
		PrevLogTerm:       r.PrevLogTerm,
		Entries:           encodeLogs(r.Entries),
		LeaderCommitIndex: r.LeaderCommitIndex,
	}
}

func decodeAppendEntriesRequest(m *quoratev1.AppendEntriesRequest) (*raft.AppendEntriesRequest, error) {
	entries, err := decodeLogs(m.GetEntries())
	if err != nil {
		return nil, err
	}
	return &raft.AppendEntriesRequest{
		RPCHeader:         decodeHeader(m.GetHeader()),
		Term:              m.GetTerm(),
		Leader:            m.GetLeader(),
		PrevLogEntry:      m.GetPrevLogEntry(),
		PrevLogTerm:       m.GetPrevLogTerm(),
		Entries:           entries,
		LeaderCommitIndex: m.GetLeaderCommitIndex(),
	}, nil
}

func encodeAppendEntriesResponse(r *raft.AppendEntriesResponse) *quoratev1.AppendEntriesResponse {
	return &quoratev1.AppendEntriesResponse{
		Header:         encodeHeader(r.RPCHeader),
		Term:           r.Term,
		LastLog:        r.LastLog,
		Success:        r.Success,
		NoRetryBackoff: r.NoRetryBackoff,
	}
}

func decodeAppendEntriesResponse(m *quoratev1.AppendEntriesResponse) raft.AppendEntriesResponse {
	return raft.AppendEntriesResponse{
		RPCHeader:      decodeHeader(m.GetHeader()),
		Term:           m.GetTerm(),
		LastLog:        m.GetLastLog(),
		Success:        m.GetSuccess(),
		NoRetryBackoff: m.GetNoRetryBackoff(),
	}
}

func encodeRequestVoteRequest(group string, r *raft.RequestVoteRequest) *quoratev1.RequestVoteRequest {
	return &quoratev1.RequestVoteRequest{
		Group:              group,
		Header:             encodeHeader(r.RPCHeader),
		Term:               r.Term,
		Candidate:          r.Candidate,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		LeadershipTransfer: r.LeadershipTransfer,
	}
}

func decodeRequestVoteRequest(m *quoratev1.RequestVoteRequest) *raft.RequestVoteRequest {
	return &raft.RequestVoteRequest{
		RPCHeader:          decodeHeader(m.GetHeader()),
		Term:               m.GetTerm(),
		Candidate:          m.GetCandidate(),
		LastLogIndex:       m.GetLastLogIndex(),
		LastLogTerm:        m.GetLastLogTerm(),
		LeadershipTransfer: m.GetLeadershipTransfer(),
	}
}

func encodeRequestVoteResponse(r *raft.RequestVoteResponse) *quoratev1.RequestVoteResponse {
	return &quoratev1.RequestVoteResponse{
		Header:  encodeHeader(r.RPCHeader),
		Term:    r.Term,
		Peers:   r.Peers,
		Granted: r.Granted,
	}
}

func decodeRequestVoteResponse(m *quoratev1.RequestVoteResponse) raft.RequestVoteResponse {
	return raft.RequestVoteResponse{
		RPCHeader: decodeHeader(m.GetHeader()),
		Term:      m.GetTerm(),
		Peers:     m.GetPeers(),
		Granted:   m.GetGranted(),
	}
}

func encodeRequestPreVoteRequest(group string, r *raft.RequestPreVoteRequest) *quoratev1.RequestPreVoteRequest {
	return &quoratev1.RequestPreVoteRequest{
		Group:        group,
		Header:       encodeHeader(r.RPCHeader),
		Term:         r.Term,
		LastLogIndex: r.LastLogIndex,
		LastLogTerm:  r.LastLogTerm,
	}
}

func decodeRequestPreVoteRequest(m *quoratev1.RequestPreVoteRequest) *raft.RequestPreVoteRequest {
	return &raft.RequestPreVoteRequest{
		RPCHeader:    decodeHeader(m.GetHeader()),
		Term:         m.GetTerm(),
		LastLogIndex: m.GetLastLogIndex(),
		LastLogTerm:  m.GetLastLogTerm(),
	}
}

func encodeRequestPreVoteResponse(r *raft.RequestPreVoteResponse) *quoratev1.RequestPreVoteResponse {
	return &quoratev1.RequestPreVoteResponse{
		Header:  encodeHeader(r.RPCHeader),
		Term:    r.Term,
		Granted: r.Granted,
	}
}

func decodeRequestPreVoteResponse(m *quoratev1.RequestPreVoteResponse) raft.RequestPreVoteResponse {
	return raft.RequestPreVoteResponse{
		RPCHeader: decodeHeader(m.GetHeader()),
		Term:      m.GetTerm(),
		Granted:   m.GetGranted(),
	}
}

func encodeTimeoutNowRequest(group string, r *raft.TimeoutNowRequest) *quoratev1.TimeoutNowRequest {
	return &quoratev1.TimeoutNowRequest{
		Group:  group,
		Header: encodeHeader(r.RPCHeader),
	}
}

func decodeTimeoutNowRequest(m *quoratev1.TimeoutNowRequest) *raft.TimeoutNowRequest {
	return &raft.TimeoutNowRequest{RPCHeader: decodeHeader(m.GetHeader())}
}

func encodeTimeoutNowResponse(r *raft.TimeoutNowResponse) *quoratev1.TimeoutNowResponse {
	return &quoratev1.TimeoutNowResponse{Header: encodeHeader(r.RPCHeader)}
}

func decodeTimeoutNowResponse(m *quoratev1.TimeoutNowResponse) raft.TimeoutNowResponse {
	return raft.TimeoutNowResponse{RPCHeader: decodeHeader(m.GetHeader())}
}

func encodeInstallSnapshotRequest(group string, r *raft.InstallSnapshotRequest) *quoratev1.InstallSnapshotRequest {
	return &quoratev1.InstallSnapshotRequest{
		Group:              group,
		Header:             encodeHeader(r.RPCHeader),
		SnapshotVersion:    int64(r.SnapshotVersion),
		Term:               r.Term,
		Leader:             r.Leader,
		LastLogIndex:       r.LastLogIndex,
		LastLogTerm:        r.LastLogTerm,
		Peers:              r.Peers,
		Configuration:      r.Configuration,
		ConfigurationIndex: r.ConfigurationIndex,
		Size:               r.Size,
	}
}

func decodeInstallSnapshotRequest(m *quoratev1.InstallSnapshotRequest) (*raft.InstallSnapshotRequest, error) {
	if m.GetSize() < 0 {
		return nil, fmt.Errorf("raftgrpc: snapshot size %d is negative", m.GetSize())
	}
	return &raft.InstallSnapshotRequest{
		RPCHeader:          decodeHeader(m.GetHeader()),
		SnapshotVersion:    raft.SnapshotVersion(m.GetSnapshotVersion()),
		Term:               m.GetTerm(),
		Leader:             m.GetLeader(),
		LastLogIndex:       m.GetLastLogIndex(),
		LastLogTerm:        m.GetLastLogTerm(),
		Peers:              m.GetPeers(),
		Configuration:      m.GetConfiguration(),
		ConfigurationIndex: m.GetConfigurationIndex(),
		Size:               m.GetSize(),
	}, nil
}

func encodeInstallSnapshotResponse(r *raft.InstallSnapshotResponse) *quoratev1.InstallSnapshotResponse {
	return &quoratev1.InstallSnapshotResponse{
		Header:  encodeHeader(r.RPCHeader),
		Term:    r.Term,
		Success: r.Success,
	}
}

func decodeInstallSnapshotResponse(m *quoratev1.InstallSnapshotResponse) raft.InstallSnapshotResponse {
	return raft.InstallSnapshotResponse{
		RPCHeader: decodeHeader(m.GetHeader()),
		Term:      m.GetTerm(),
		Success:   m.GetSuccess(),
	}
}
